// A reference for bench/tunnel.ts: what two processes that frame and unframe every byte cost when written in C. Each
// accepted connection is relayed, in a child process of its own, to a new connection to <target port>; the "framed"
// side carries [u32 length | bytes] frames (length 0: the sender half-closed), the "plain" side raw bytes.
//   framed-relay entry <target port>   (accepts plain connections, connects framed)   prints {"port":N}
//   framed-relay exit <target port>    (accepts framed connections, connects plain)
// The -splice modes carry the same frames without copying payload through user space: splice(2) moves it
// socket → pipe → socket and only the 4-byte headers are written and read (the zero-copy floor of a framed pair).
//   framed-relay entry-splice|exit-splice <target port> [pipe bytes, default SPLICE_PIPE]
// Writes block, so a connection that carries bulk data both ways at once could stall; the bench sends one way only.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

#define BUF (256 * 1024)
/** Pipe size asked for in splice mode, i.e. the largest frame: F_SETPIPE_SZ may grant more (it rounds up to a power of
 * two pages) or refuse above /proc/sys/fs/pipe-max-size for an unprivileged user, who then keeps the default. */
#define SPLICE_PIPE (1024 * 1024)

/** A pipe that payload crosses in splice mode; it is empty between frames. */
struct conduit {
  int r, w;
  size_t cap;
};

static int write_all(int fd, const char *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static int read_all(int fd, char *p, size_t n) {
  while (n > 0) {
    ssize_t r = read(fd, p, n);
    if (r <= 0) return -1;
    p += r;
    n -= (size_t)r;
  }
  return 0;
}

/** plain → framed: one read, one frame. Returns 1 when the plain side ended (EOF frame sent), -1 on error. */
static int frame_once(int plain, int framed, char *buf) {
  ssize_t n = read(plain, buf, BUF);
  if (n < 0) return -1;
  uint32_t len = htonl((uint32_t)n);
  struct iovec iov[2] = {{&len, 4}, {buf, (size_t)n}};
  size_t want = 4 + (size_t)n;
  ssize_t w = writev(framed, iov, n > 0 ? 2 : 1);
  if (w < 0) return -1;
  if ((size_t)w < want) {
    if ((size_t)w < 4) return -1; // a short write inside a 4-byte header does not happen on a blocking socket
    if (write_all(framed, buf + (w - 4), want - (size_t)w) < 0) return -1;
  }
  return n == 0 ? 1 : 0;
}

/** framed → plain: one frame. Returns 1 on the EOF frame (the plain side is half-closed), -1 on error. */
static int unframe_once(int framed, int plain, char *buf) {
  uint32_t len;
  if (read_all(framed, (char *)&len, 4) < 0) return -1;
  len = ntohl(len);
  if (len == 0) {
    shutdown(plain, SHUT_WR);
    return 1;
  }
  if (len > BUF || read_all(framed, buf, len) < 0) return -1;
  return write_all(plain, buf, len) < 0 ? -1 : 0;
}

/** plain → framed without copying: splice what the socket holds (up to the pipe's size) into the pipe, write its
 * header, splice it on. Returns 1 when the plain side ended (EOF frame sent), -1 on error. */
static int frame_splice(int plain, int framed, const struct conduit *c) {
  ssize_t n = splice(plain, NULL, c->w, NULL, c->cap, SPLICE_F_MOVE);
  if (n < 0) return -1;
  uint32_t len = htonl((uint32_t)n);
  // MSG_MORE: the header leaves in the same segment as the start of its payload (both sockets are TCP_NODELAY).
  if (send(framed, &len, 4, n > 0 ? MSG_MORE : 0) != 4) return -1;
  for (ssize_t left = n; left > 0;) {
    ssize_t w = splice(c->r, NULL, framed, NULL, (size_t)left, SPLICE_F_MOVE);
    if (w <= 0) return -1;
    left -= w;
  }
  return n == 0 ? 1 : 0;
}

/** framed → plain without copying: read the header, splice exactly its length on, a pipeful at a time. Returns 1 on
 * the EOF frame (the plain side is half-closed), -1 on error. */
static int unframe_splice(int framed, int plain, const struct conduit *c) {
  uint32_t len;
  if (read_all(framed, (char *)&len, 4) < 0) return -1;
  len = ntohl(len);
  if (len == 0) {
    shutdown(plain, SHUT_WR);
    return 1;
  }
  for (size_t left = len; left > 0;) {
    // The pipe may take fewer bytes than asked (it counts buffers, not bytes): move what it took, then go on.
    ssize_t in = splice(framed, NULL, c->w, NULL, left < c->cap ? left : c->cap, SPLICE_F_MOVE);
    if (in <= 0) return -1;
    for (ssize_t out = in; out > 0;) {
      ssize_t w = splice(c->r, NULL, plain, NULL, (size_t)out, SPLICE_F_MOVE);
      if (w <= 0) return -1;
      out -= w;
    }
    left -= (size_t)in;
  }
  return 0;
}

static int open_conduit(struct conduit *c, size_t want) {
  int fds[2];
  if (pipe(fds) < 0) return -1;
  fcntl(fds[1], F_SETPIPE_SZ, (int)want); // refused: the default size is kept, which works, only slower
  int cap = fcntl(fds[1], F_GETPIPE_SZ);
  if (cap <= 0) return -1;
  *c = (struct conduit){fds[0], fds[1], (size_t)cap};
  return 0;
}

/** Both directions of one connection; `pipe_size` 0 copies through user space, else splices through pipes of it. */
static void relay(int plain, int framed, size_t pipe_size) {
  struct conduit up_pipe, down_pipe;
  if (pipe_size > 0 && (open_conduit(&up_pipe, pipe_size) < 0 || open_conduit(&down_pipe, pipe_size) < 0)) return;
  static char up[BUF], down[BUF];
  int plain_open = 1, framed_open = 1;
  while (plain_open || framed_open) {
    struct pollfd p[2] = {{plain, plain_open ? POLLIN : 0, 0}, {framed, framed_open ? POLLIN : 0, 0}};
    if (poll(p, 2, -1) < 0) return;
    if (p[0].revents) {
      int r = pipe_size ? frame_splice(plain, framed, &up_pipe) : frame_once(plain, framed, up);
      if (r < 0) return;
      if (r == 1) plain_open = 0;
    }
    if (p[1].revents) {
      int r = pipe_size ? unframe_splice(framed, plain, &down_pipe) : unframe_once(framed, plain, down);
      if (r < 0) return;
      if (r == 1) framed_open = 0;
    }
  }
}

int main(int argc, char **argv) {
  const char *mode = argc >= 3 ? argv[1] : "";
  int entry = strncmp(mode, "entry", 5) == 0;
  const char *rest = mode + (entry ? 5 : 4);
  int splicing = strcmp(rest, "-splice") == 0;
  if (!(entry || strncmp(mode, "exit", 4) == 0) || !(splicing || *rest == 0) || argc > (splicing ? 4 : 3)) {
    fprintf(stderr, "usage: framed-relay entry|exit <target port>\n"
                    "       framed-relay entry-splice|exit-splice <target port> [pipe bytes]\n");
    return 2;
  }
  size_t pipe_size = splicing ? (argc == 4 ? (size_t)atol(argv[3]) : SPLICE_PIPE) : 0;
  if (splicing && pipe_size == 0) {
    fprintf(stderr, "framed-relay: pipe bytes must be a positive number, not %s\n", argv[3]);
    return 2;
  }
  signal(SIGCHLD, SIG_IGN); // children are not waited for
  int one = 1;
  int ls = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in addr = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  socklen_t alen = sizeof addr;
  if (bind(ls, (struct sockaddr *)&addr, sizeof addr) < 0 || listen(ls, 128) < 0) return 1;
  getsockname(ls, (struct sockaddr *)&addr, &alen);
  printf("{\"port\":%d}\n", ntohs(addr.sin_port));
  fflush(stdout);
  for (;;) {
    int in = accept(ls, NULL, NULL);
    if (in < 0) continue;
    if (fork() == 0) {
      close(ls);
      int out = socket(AF_INET, SOCK_STREAM, 0);
      struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)atoi(argv[2])),
                               .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      if (connect(out, (struct sockaddr *)&to, sizeof to) < 0) return 1;
      setsockopt(in, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      setsockopt(out, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
      if (entry) relay(in, out, pipe_size);
      else relay(out, in, pipe_size);
      return 0;
    }
    close(in);
  }
}
