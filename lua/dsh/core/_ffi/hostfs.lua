-- libc calls for dsh.core.hostfs (host file operations with nanosecond metadata)
-- and dsh.core.hostwatch (inotify).
-- struct statx has the same layout on every Linux architecture, unlike
-- struct stat, so it is declared here under a private name, and so are the
-- libc constants hostfs uses: DSH_HOSTFS_<NAME> is <NAME> of the C headers.
-- The build's FFI probe (core/ffi/probe.lua) checks both against the C
-- compiler's struct statx and constants (spec/01-core/10-ffi_contract_spec.lua).
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
enum {
  DSH_HOSTFS_AT_FDCWD = -100, DSH_HOSTFS_AT_SYMLINK_NOFOLLOW = 0x100, DSH_HOSTFS_STATX_BASIC_STATS = 0x7ff,
  DSH_HOSTFS_AT_EMPTY_PATH = 0x1000,
  DSH_HOSTFS_O_RDONLY = 0, DSH_HOSTFS_O_NONBLOCK = 2048, DSH_HOSTFS_O_NOFOLLOW = 131072,
  DSH_HOSTFS_O_WRONLY = 1, DSH_HOSTFS_O_CREAT = 64, DSH_HOSTFS_O_EXCL = 128, DSH_HOSTFS_O_CLOEXEC = 524288,
  DSH_HOSTFS_ENOENT = 2, DSH_HOSTFS_EPERM = 1, DSH_HOSTFS_EACCES = 13, DSH_HOSTFS_ENOTDIR = 20,
  DSH_HOSTFS_EINTR = 4, DSH_HOSTFS_ELOOP = 40,
  DSH_HOSTFS_S_IFMT = 0xF000, DSH_HOSTFS_S_IFREG = 0x8000, DSH_HOSTFS_S_IFDIR = 0x4000,
  DSH_HOSTFS_S_IFLNK = 0xA000,
  DSH_HOSTFS_EEXIST = 17, DSH_HOSTFS_EAGAIN = 11, DSH_HOSTFS_AT_REMOVEDIR = 0x200,
  DSH_HOSTFS_IN_NONBLOCK = 2048, DSH_HOSTFS_IN_CLOEXEC = 524288,
  DSH_HOSTFS_IN_MODIFY = 0x2, DSH_HOSTFS_IN_ATTRIB = 0x4, DSH_HOSTFS_IN_MOVED_FROM = 0x40,
  DSH_HOSTFS_IN_MOVED_TO = 0x80, DSH_HOSTFS_IN_CREATE = 0x100, DSH_HOSTFS_IN_DELETE = 0x200,
  DSH_HOSTFS_IN_DELETE_SELF = 0x400, DSH_HOSTFS_IN_MOVE_SELF = 0x800, DSH_HOSTFS_IN_Q_OVERFLOW = 0x4000,
  DSH_HOSTFS_IN_IGNORED = 0x8000, DSH_HOSTFS_IN_ONLYDIR = 0x1000000, DSH_HOSTFS_IN_DONT_FOLLOW = 0x2000000,
  DSH_HOSTFS_IN_ISDIR = 0x40000000
};
struct dsh_hostfs_timespec { int64_t tv_sec; int64_t tv_nsec; };
struct dsh_hostfs_inotify_event { int32_t wd; uint32_t mask; uint32_t cookie; uint32_t len; };
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
int symlink(const char *target, const char *path);
int link(const char *from, const char *to);
int utimensat(int dirfd, const char *path, const struct dsh_hostfs_timespec times[2], int flags);
int inotify_init1(int flags);
int inotify_add_watch(int fd, const char *path, uint32_t mask);
int inotify_rm_watch(int fd, int wd);
]]
