-- Declarations of core/include/dsh/proc.h for ffi.cdef (needs dsh._ffi.loop first).
return [[
typedef struct dsh_proc dsh_proc_t;
enum dsh_stdio_mode { DSH_STDIO_NULL = 0, DSH_STDIO_PIPE = 1, DSH_STDIO_INHERIT = 2 };
enum dsh_proc_stream { DSH_PROC_STDIN = 0, DSH_PROC_STDOUT = 1, DSH_PROC_STDERR = 2 };
typedef void (*dsh_proc_notify_fn)(void *ud, dsh_proc_t *p, uint32_t kind, int32_t status, int64_t n);
typedef struct dsh_proc_opts {
  const char *const *argv;
  const char *const *envp;
  const char *cwd;
  int32_t stdin_mode, stdout_mode, stderr_mode;
  int32_t pty;
  uint16_t pty_rows, pty_cols;
  int32_t new_session;
  int32_t uid, gid;
  int32_t init_groups;
  int32_t manual_io;
  uint32_t max_buffer_bytes;
  dsh_proc_notify_fn notify;
  void *notify_ud;
} dsh_proc_opts_t;
typedef struct dsh_proc_status {
  int32_t pid;
  int32_t running;
  int32_t exit_code;
  int32_t term_signal;
  int32_t core_dumped;
  int32_t quiescent;
  int32_t stdout_eof, stderr_eof;
  int32_t stdin_open;
  int32_t term_requested;
  int32_t kill_sent;
  uint64_t stdout_bytes, stderr_bytes;
  uint64_t stdin_pending;
} dsh_proc_status_t;
int dsh_proc_spawn(dsh_loop_t *loop, const dsh_proc_opts_t *opts, uint64_t id,
                   dsh_proc_t **out, char *err, size_t errlen);
int32_t dsh_proc_pid(const dsh_proc_t *p);
uint64_t dsh_proc_id(const dsh_proc_t *p);
int dsh_proc_status(const dsh_proc_t *p, dsh_proc_status_t *st);
int dsh_proc_fd(const dsh_proc_t *p, int stream);
int dsh_proc_peek(dsh_proc_t *p, int stream, const uint8_t **data, size_t *n);
int dsh_proc_consume(dsh_proc_t *p, int stream, size_t n);
int dsh_proc_write(dsh_proc_t *p, const uint8_t *data, size_t n);
int dsh_proc_close_stdin(dsh_proc_t *p);
int dsh_proc_signal(dsh_proc_t *p, int sig, int32_t group);
int dsh_proc_terminate(dsh_proc_t *p, int64_t grace_ms);
int dsh_proc_quiescent(dsh_proc_t *p);
int dsh_proc_resize(dsh_proc_t *p, uint16_t rows, uint16_t cols);
int dsh_proc_signum(const char *name);
const char *dsh_proc_signame(int sig);
void dsh_proc_free(dsh_proc_t *p);
int64_t dsh_proc_live_count(void);
]]
