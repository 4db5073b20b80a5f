// devop-open: reads one file of the target container for the agent (agent/files/open-in-target.ts), resolved inside the
// container's root by the kernel, so that nothing the container does to its own tree (a symlink, absolute or
// relative, a ".." or a directory swapped for a symlink while the agent reads) can name a file outside it — the node's
// files, or another pod's, which the agent (root, hostPID) could otherwise reach through its own /proc.
//
//   devop-open ROOT PATH    ROOT: the container's root as the agent sees it (/proc/PID/root); PATH: absolute, inside it
//
// stdout: `ok SIZE\n` then the file's bytes to its end (exit 0); or one line `error CODE WHY` (exit 1). A read that
// fails after the `ok` line ends with exit 2 (the agent resets the stream).
//
// How: ROOT is opened once (the agent's one jump through /proc); PATH is resolved from it with openat2's
// RESOLVE_IN_ROOT (".." stops at ROOT, absolute symlinks start again at ROOT) and RESOLVE_NO_MAGICLINKS (no
// /proc/*/root or /proc/*/fd jump, the container's own /proc included), as O_PATH: opening a FIFO or a device can block
// or act, so nothing is opened for reading before fstat says it is a regular file. The O_PATH descriptor is then
// reopened for reading through /proc/self/fd (the same file, with no name resolved again), and its identity checked
// against the one resolved (device and inode). Bytes come from that descriptor only.
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <linux/openat2.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

// openat2 answers EAGAIN when a rename or a mount raced the resolution of "..": resolving again is the documented
// answer (openat2(2)); a bound, so that a container renaming without pause cannot keep a read here.
#define MAX_TRIES 32

static int fail(int err, const char *why) {
  const char *code = err == ENOENT    ? "ENOENT"
                     : err == EACCES  ? "EACCES"
                     : err == ENOTDIR ? "ENOTDIR"
                     : err == ELOOP   ? "ELOOP"
                     : err == EXDEV   ? "EXDEV"
                     : err == EISDIR  ? "EISDIR"
                     : err == EAGAIN  ? "EAGAIN"
                     : err == ENOSYS  ? "ENOSYS"
                     : err == EPERM   ? "EPERM"
                     : err == EINVAL  ? "EINVAL"
                                      : "EIO";
  printf("error %s %s: %s\n", code, why, strerror(err));
  fflush(stdout);
  return 1;
}

int main(int argc, char **argv) {
  prctl(PR_SET_PDEATHSIG, SIGKILL);  // never outlives the agent
  if (argc != 3 || argv[2][0] != '/') {
    fprintf(stderr, "usage: devop-open ROOT /PATH\n");
    return 1;
  }
  int root = open(argv[1], O_PATH | O_DIRECTORY | O_CLOEXEC);
  if (root < 0) return fail(errno, "the container's root");

  struct open_how how = {
      .flags = O_PATH | O_CLOEXEC,
      .resolve = RESOLVE_IN_ROOT | RESOLVE_NO_MAGICLINKS,
  };
  int found = -1;
  for (int i = 0; i < MAX_TRIES && found < 0; i++) {
    found = (int)syscall(SYS_openat2, root, argv[2], &how, sizeof how);
    if (found < 0 && errno != EAGAIN) break;
  }
  if (found < 0) {
    if (errno == ENOSYS) return fail(ENOSYS, "openat2 (Linux 5.6 or later on the node)");
    return fail(errno, "walking the path");
  }
  struct stat resolved;
  if (fstat(found, &resolved) != 0) return fail(errno, "fstat");
  if (!S_ISREG(resolved.st_mode)) return fail(S_ISDIR(resolved.st_mode) ? EISDIR : EINVAL, "not a regular file");

  char self[64];
  snprintf(self, sizeof self, "/proc/self/fd/%d", found);
  int fd = open(self, O_RDONLY | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) return fail(errno, "reopening for reading");
  struct stat opened;
  if (fstat(fd, &opened) != 0) return fail(errno, "fstat");
  if (!S_ISREG(opened.st_mode) || opened.st_dev != resolved.st_dev || opened.st_ino != resolved.st_ino)
    return fail(EXDEV, "the file changed while it was opened");

  printf("ok %lld\n", (long long)opened.st_size);
  fflush(stdout);
  char buf[65536];
  for (;;) {
    ssize_t n = read(fd, buf, sizeof buf);
    if (n == 0) return 0;
    if (n < 0) {
      if (errno == EINTR) continue;
      return 2;
    }
    for (ssize_t off = 0; off < n;) {
      ssize_t w = write(STDOUT_FILENO, buf + off, (size_t)(n - off));
      if (w < 0) {
        if (errno == EINTR) continue;
        return 2;
      }
      off += w;
    }
  }
}
