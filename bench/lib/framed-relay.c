// A reference for bench/tunnel.ts: what two processes that frame and unframe every byte cost when written in C. Each
// accepted connection is relayed, in a child process of its own, to a new connection to <target port>; the "framed"
// side carries [u32 length | bytes] frames (length 0: the sender half-closed), the "plain" side raw bytes.
//   framed-relay entry   (accepts plain connections, connects framed)   prints {"port":N}
//   framed-relay exit    (accepts framed connections, connects plain)
// Writes block, so a connection that carries bulk data both ways at once could stall; the bench sends one way only.
#include <arpa/inet.h>
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

static void relay(int plain, int framed) {
  static char up[BUF], down[BUF];
  int plain_open = 1, framed_open = 1;
  while (plain_open || framed_open) {
    struct pollfd p[2] = {{plain, plain_open ? POLLIN : 0, 0}, {framed, framed_open ? POLLIN : 0, 0}};
    if (poll(p, 2, -1) < 0) return;
    if (p[0].revents) {
      int r = frame_once(plain, framed, up);
      if (r < 0) return;
      if (r == 1) plain_open = 0;
    }
    if (p[1].revents) {
      int r = unframe_once(framed, plain, down);
      if (r < 0) return;
      if (r == 1) framed_open = 0;
    }
  }
}

int main(int argc, char **argv) {
  if (argc != 3 || (strcmp(argv[1], "entry") != 0 && strcmp(argv[1], "exit") != 0)) {
    fprintf(stderr, "usage: framed-relay entry|exit <target port>\n");
    return 2;
  }
  int entry = strcmp(argv[1], "entry") == 0;
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
      if (entry) relay(in, out);
      else relay(out, in);
      return 0;
    }
    close(in);
  }
}
