-- A few libc calls the Lua layer needs directly (process liveness, identity,
-- file modes), and the errno values dsh.core.sysutil tells apart: DSH_SYS_<NAME>
-- is <NAME> of the C headers, checked by the build's FFI probe
-- (spec/01-core/10-ffi_contract_spec.lua).
return [[
enum { DSH_SYS_EPERM = 1, DSH_SYS_ENOENT = 2, DSH_SYS_ESRCH = 3, DSH_SYS_EACCES = 13 };
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
