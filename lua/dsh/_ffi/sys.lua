-- A few libc calls the Lua layer needs directly (process liveness, identity).
return [[
int kill(int pid, int sig);
int getpid(void);
unsigned int getuid(void);
unsigned int geteuid(void);
int setsid(void);
int chmod(const char *path, unsigned int mode);
int setenv(const char *name, const char *value, int overwrite);
int unsetenv(const char *name);
char *strerror(int errnum);
extern char **environ;
]]
