-- Declarations of core/include/dsh/tty.h for ffi.cdef. Keep in step with the header.
return [[
typedef struct dsh_tty dsh_tty_t;
int dsh_tty_isatty(int fd);
int dsh_tty_raw(int fd, dsh_tty_t **saved);
int dsh_tty_restore(dsh_tty_t *saved);
int dsh_tty_size(int fd, uint16_t *rows, uint16_t *cols);
int dsh_fd_nonblock(int fd, int32_t on);
int dsh_fd_read(int fd, uint8_t *buf, size_t cap, size_t *n);
]]
