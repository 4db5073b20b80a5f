// A container's logger, as containerd's shim runs one (`ctr run --log-uri binary://LOGGER?LOGFILE`, pkg/process/io.go
// NewBinaryIO): fd 3 is the container's stdout, fd 4 its stderr, and closing fd 5 tells the shim to start the container.
// The shim starts it before every container and waits for fd 5: a small C process, not a runtime's start, keeps that
// off the container's start. Each line goes to LOGFILE in the CRI format, as containerd's CRI plugin writes it
// (internal/cri/io/logger.go redirectLogs): `<RFC3339Nano> <stream> F <text>`, "\r\n" ending a line like "\n", a line
// over MAX_LINE bytes cut into P(artial) entries of MAX_LINE bytes, and a last line without a newline kept as P.
//   container-logger LOGFILE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

// containerd's CRI plugin: max_container_log_line_size, 16 KiB by default (a longer line becomes P entries).
#define MAX_LINE 16384
// What one read takes from a pipe (a pipe holds 64 KiB by default).
#define READ_SIZE 65536
// Entries are gathered and written to the file in one write(2) up to this size.
#define OUT_SIZE (2 * MAX_LINE + 4096)

struct stream {
  int fd;
  const char *name;
  char line[MAX_LINE];
  size_t len;
  // A "\r" seen last: it ends the line if "\n" follows, else it is text.
  int cr;
};

static int log_fd;
static char out[OUT_SIZE];
static size_t out_len;

static void flush_out(void) {
  size_t done = 0;
  while (done < out_len) {
    ssize_t n = write(log_fd, out + done, out_len - done);
    if (n < 0 && errno == EINTR) continue;
    // A full disk or a removed file: drop what cannot be written and keep draining the pipes, as containerd's logger
    // does, so that the container never blocks on its stdout.
    if (n <= 0) break;
    done += (size_t)n;
  }
  out_len = 0;
}

// Go's time.RFC3339Nano in UTC: the fraction without trailing zeros, none at all on a whole second.
static size_t timestamp(char *buf, size_t size) {
  struct timespec now;
  struct tm tm;
  clock_gettime(CLOCK_REALTIME, &now);
  gmtime_r(&now.tv_sec, &tm);
  size_t n = strftime(buf, size, "%Y-%m-%dT%H:%M:%S", &tm);
  if (now.tv_nsec > 0) {
    char frac[24];
    snprintf(frac, sizeof frac, ".%09ld", now.tv_nsec);
    size_t len = strlen(frac);
    while (frac[len - 1] == '0') len--;
    memcpy(buf + n, frac, len);
    n += len;
  }
  buf[n++] = 'Z';
  return n;
}

static void entry(struct stream *s, char tag) {
  char ts[64];
  size_t ts_len = timestamp(ts, sizeof ts);
  size_t name_len = strlen(s->name);
  size_t need = ts_len + 1 + name_len + 3 + s->len + 1;
  if (out_len + need > OUT_SIZE) flush_out();
  char *p = out + out_len;
  memcpy(p, ts, ts_len);
  p += ts_len;
  *p++ = ' ';
  memcpy(p, s->name, name_len);
  p += name_len;
  *p++ = ' ';
  *p++ = tag;
  *p++ = ' ';
  memcpy(p, s->line, s->len);
  p += s->len;
  *p++ = '\n';
  out_len += need;
  s->len = 0;
}

static void text(struct stream *s, char c) {
  // A full line that goes on: its first MAX_LINE bytes are one P entry (containerd cuts at maxLen once more follows).
  if (s->len == MAX_LINE) entry(s, 'P');
  s->line[s->len++] = c;
}

static void take(struct stream *s, const char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    char c = buf[i];
    if (s->cr) {
      s->cr = 0;
      if (c == '\n') {
        entry(s, 'F');
        continue;
      }
      text(s, '\r');
    }
    if (c == '\n')
      entry(s, 'F');
    else if (c == '\r')
      s->cr = 1;
    else
      text(s, c);
  }
}

static void end(struct stream *s) {
  if (s->cr) text(s, '\r');
  s->cr = 0;
  if (s->len > 0) entry(s, 'P');
  close(s->fd);
  s->fd = -1;
}

int main(int argc, char **argv) {
  if (argc < 2) {
    fprintf(stderr, "usage: container-logger LOGFILE (run by containerd's shim: --log-uri binary://…?LOGFILE)\n");
    return 2;
  }
  // The shim sends SIGTERM once it has closed its ends of the pipes: what is still in them is written first, and the
  // logger ends when both are drained.
  signal(SIGTERM, SIG_IGN);
  log_fd = open(argv[1], O_WRONLY | O_APPEND | O_CREAT | O_CLOEXEC, 0640);
  if (log_fd < 0) {
    fprintf(stderr, "container-logger: open %s: %s\n", argv[1], strerror(errno));
    return 1;
  }
  static struct stream streams[2] = {{.fd = 3, .name = "stdout"}, {.fd = 4, .name = "stderr"}};
  close(5);
  static char buf[READ_SIZE];
  for (;;) {
    struct pollfd fds[2];
    int nfds = 0;
    for (int i = 0; i < 2; i++) {
      if (streams[i].fd >= 0) fds[nfds++] = (struct pollfd){.fd = streams[i].fd, .events = POLLIN};
    }
    if (nfds == 0) break;
    if (poll(fds, nfds, -1) < 0) {
      if (errno == EINTR) continue;
      perror("container-logger: poll");
      break;
    }
    for (int i = 0; i < nfds; i++) {
      if (!fds[i].revents) continue;
      struct stream *s = streams[0].fd == fds[i].fd ? &streams[0] : &streams[1];
      ssize_t n = read(s->fd, buf, sizeof buf);
      if (n > 0)
        take(s, buf, (size_t)n);
      else if (n == 0 || (errno != EINTR && errno != EAGAIN))
        end(s);
    }
    flush_out();
  }
  for (int i = 0; i < 2; i++) {
    if (streams[i].fd >= 0) end(&streams[i]);
  }
  flush_out();
  close(log_fd);
  return 0;
}
