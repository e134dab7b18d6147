-- Declarations of core/include/dsh/loop.h for ffi.cdef.
return [[
typedef struct dsh_loop dsh_loop_t;
typedef struct dsh_timer dsh_timer_t;
typedef struct dsh_io dsh_io_t;
typedef struct dsh_signal dsh_signal_t;
typedef struct dsh_event { uint32_t kind; int32_t status; uint64_t id; int64_t n; } dsh_event_t;
enum dsh_event_kind {
  DSH_EV_TIMER = 1, DSH_EV_IO = 2, DSH_EV_SIGNAL = 3,
  DSH_EV_PROC_DATA = 10, DSH_EV_PROC_EOF = 11, DSH_EV_PROC_EXIT = 12,
  DSH_EV_PROC_QUIET = 13, DSH_EV_PROC_DRAIN = 14,
  DSH_EV_HTTP_HEAD = 20, DSH_EV_HTTP_DATA = 21, DSH_EV_HTTP_DONE = 22, DSH_EV_HTTP_SEND = 23
};
enum dsh_io_events { DSH_IO_READ = 1, DSH_IO_WRITE = 2 };
dsh_loop_t *dsh_loop_default(void);
void *dsh_loop_ev(dsh_loop_t *loop);
uint64_t dsh_loop_new_id(dsh_loop_t *loop);
int dsh_loop_push(dsh_loop_t *loop, uint32_t kind, uint64_t id, int32_t status, int64_t n);
int dsh_loop_run(dsh_loop_t *loop, int64_t timeout_ms);
size_t dsh_loop_poll(dsh_loop_t *loop, dsh_event_t *out, size_t max);
size_t dsh_loop_pending(const dsh_loop_t *loop);
double dsh_loop_now_ms(dsh_loop_t *loop);
int dsh_timer_new(dsh_loop_t *loop, uint64_t id, dsh_timer_t **out);
int dsh_timer_start(dsh_timer_t *t, int64_t after_ms, int64_t repeat_ms);
int dsh_timer_stop(dsh_timer_t *t);
void dsh_timer_free(dsh_timer_t *t);
int dsh_io_new(dsh_loop_t *loop, uint64_t id, int fd, dsh_io_t **out);
int dsh_io_start(dsh_io_t *io, int events);
int dsh_io_stop(dsh_io_t *io);
void dsh_io_free(dsh_io_t *io);
int dsh_signal_new(dsh_loop_t *loop, uint64_t id, int signum, dsh_signal_t **out);
int dsh_signal_start(dsh_signal_t *s);
int dsh_signal_stop(dsh_signal_t *s);
void dsh_signal_free(dsh_signal_t *s);
]]
