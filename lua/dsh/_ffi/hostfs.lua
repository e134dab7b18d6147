-- libc calls for dsh.hostfs (host file operations with nanosecond metadata).
-- struct statx has the same layout on every Linux architecture, unlike
-- struct stat, so it is declared here under a private name.
return [[
struct dsh_hostfs_statx_ts { int64_t tv_sec; uint32_t tv_nsec; int32_t reserved; };
struct dsh_hostfs_statx {
  uint32_t stx_mask; uint32_t stx_blksize; uint64_t stx_attributes;
  uint32_t stx_nlink; uint32_t stx_uid; uint32_t stx_gid; uint16_t stx_mode; uint16_t spare0;
  uint64_t stx_ino; uint64_t stx_size; uint64_t stx_blocks; uint64_t stx_attributes_mask;
  struct dsh_hostfs_statx_ts stx_atime, stx_btime, stx_ctime, stx_mtime;
  uint32_t stx_rdev_major; uint32_t stx_rdev_minor; uint32_t stx_dev_major; uint32_t stx_dev_minor;
  uint64_t spare2[14];
};
int statx(int dirfd, const char *path, int flags, unsigned int mask, struct dsh_hostfs_statx *buf);
long readlink(const char *path, char *buf, size_t size);
int open(const char *path, int flags, ...);
long write(int fd, const void *buf, size_t n);
int close(int fd);
int fchmod(int fd, unsigned int mode);
int chmod(const char *path, unsigned int mode);
int mkdir(const char *path, unsigned int mode);
int unlink(const char *path);
int rename(const char *from, const char *to);
char *strerror(int errnum);
]]
