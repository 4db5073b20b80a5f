// A reference of bench/steal.ts: devop's agent side written in C, for whole steals only, speaking devop's own wire
// protocol (docs/protocol.md) to devop's real session (bench/lib/session-proc.ts: the CLI's tunnel, mux and incoming
// handler). Its path — client → this → port-forward relay → devop's session → app — prices what a native agent side
// would leave of devop's stolen path, beside the floor (both sides in C) and devop's own (both in Node).
// What it does: answers hello and subscribe; opens one stream per client connection with the same OPEN (and traffic
// event, unless the client reports connections from their streams: stream-events) devop's agent sends, in one write; DATA within the peer's credit, CREDIT once a quarter of the 256 KiB window
// was written to the client, END and RESET both ways, the close event with the byte counts.
// Not done (not needed by the bench, needed by a real agent): one tunnel only; writes block (small requests and
// answers); no filters, mirroring, pings or window growth.
//   c-agent <client port> <tunnel port>    prints LISTENING
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <unistd.h>

#include "bench-net.h"

#define SLOTS 65536
#define MAX_DATA (64 * 1024)
#define WINDOW (256 * 1024)
#define INBUF (4 * 1024 * 1024)
enum { CONTROL, OPEN, DATA, CREDIT, END, RESET, ACCEPT, GOAWAY };
enum { TAG_LISTEN = 1, TAG_TUNNEL_LISTEN, TAG_TUNNEL, TAG_CONN };

struct conn {
  int fd;
  uint32_t id;
  int64_t credit;     // what the peer lets this side send
  uint32_t consumed;  // written to the client since the last CREDIT
  int ended_here, ended_there, paused;
  uint64_t bytes_in, bytes_out;
  char remote[INET_ADDRSTRLEN];
  int remote_port;
};

static struct conn conns[SLOTS];
static int ep, tunnel = -1, listener, tunnel_listener, client_port;
static uint32_t next_id = 2;
static int reports_streams; /* the client listed stream-events: OPEN carries connId, no connection events */
static uint8_t in[INBUF], out[MAX_DATA + 2048];
static size_t in_len;

static void write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) die("write");
    p += w, n -= (size_t)w;
  }
}

/** Appends one frame to `out` at `*at` (frames made together leave in one write). */
static void frame(size_t *at, int kind, uint32_t id, const void *payload, uint32_t len) {
  put32(out + *at, len);
  out[*at + 4] = (uint8_t)kind;
  put32(out + *at + 5, id);
  if (len) memcpy(out + *at + 9, payload, len);
  *at += 9 + len;
}

static void send_now(int kind, uint32_t id, const void *payload, uint32_t len) {
  size_t at = 0;
  frame(&at, kind, id, payload, len);
  write_all(tunnel, out, at);
}

static double now_ms(void) {
  struct timeval tv;
  gettimeofday(&tv, NULL);
  return tv.tv_sec * 1000.0 + tv.tv_usec / 1000.0;
}

static int traffic(char *buf, size_t room, struct conn *c, const char *phase) {
  int n = snprintf(buf, room,
                   "{\"type\":\"traffic\",\"event\":{\"kind\":\"connection\",\"connId\":\"%d-%u\",\"port\":%d,"
                   "\"remoteAddress\":\"%s\",\"remotePort\":%d,\"to\":\"local\",\"phase\":\"%s\"",
                   client_port, c->id / 2, client_port, c->remote, c->remote_port, phase);
  if (strcmp(phase, "close") == 0)
    n += snprintf(buf + n, room - n, ",\"bytesIn\":%llu,\"bytesOut\":%llu", (unsigned long long)c->bytes_in,
                  (unsigned long long)c->bytes_out);
  return n + snprintf(buf + n, room - n, ",\"at\":%.0f}}", now_ms());
}

static void set_reading(struct conn *c, int on) {
  struct epoll_event ev = {.events = on ? EPOLLIN : 0, .data.u64 = (uint64_t)TAG_CONN << 32 | c->id};
  epoll_ctl(ep, EPOLL_CTL_MOD, c->fd, &ev);
  c->paused = !on;
}

static void finish(struct conn *c, const char *reset) {
  char msg[512];
  if (reset) send_now(RESET, c->id, reset, (uint32_t)strlen(reset));
  close(c->fd);
  c->fd = -1;
  if (!reports_streams) send_now(CONTROL, 0, msg, (uint32_t)traffic(msg, sizeof msg, c, "close"));
}

static struct conn *find(uint32_t id) {
  struct conn *c = &conns[(id / 2) & (SLOTS - 1)];
  return c->fd >= 0 && c->id == id ? c : NULL;
}

/** The value of a JSON string or number field, copied as text (enough for the CLI's own hello and subscribe). */
static int field(const uint8_t *json, uint32_t len, const char *name, char *to, size_t room) {
  char key[64];
  snprintf(key, sizeof key, "\"%s\":", name);
  const char *p = memmem(json, len, key, strlen(key)), *end = (const char *)json + len;
  if (!p) return 0;
  p += strlen(key);
  int quoted = *p == '"';
  p += quoted;
  size_t n = 0;
  while (p < end && n + 1 < room && (quoted ? *p != '"' : (*p != ',' && *p != '}'))) to[n++] = *p++;
  to[n] = 0;
  return 1;
}

static void on_control(const uint8_t *json, uint32_t len) {
  char type[32], id[256], port[16], answer[512];
  if (!field(json, len, "type", type, sizeof type)) return;
  if (strcmp(type, "hello") == 0) {
    reports_streams = memmem(json, len, "\"stream-events\"", 15) != NULL;
    int n = snprintf(answer, sizeof answer,
                     "{\"type\":\"helloOk\",\"protocolVersion\":1,\"agentVersion\":\"c-agent\",\"sessionId\":\"c\","
                     "\"features\":[\"steal\",\"traffic\",\"stream-events\"]}");
    send_now(CONTROL, 0, answer, (uint32_t)n);
  } else if (strcmp(type, "subscribe") == 0 && field(json, len, "id", id, sizeof id) &&
             field(json, len, "port", port, sizeof port)) {
    int n = snprintf(answer, sizeof answer, "{\"type\":\"subscribed\",\"id\":\"%s\",\"port\":%s,\"mode\":\"steal\"}",
                     id, port);
    send_now(CONTROL, 0, answer, (uint32_t)n);
  }
}

static void on_frame(int kind, uint32_t id, const uint8_t *p, uint32_t len) {
  if (kind == CONTROL) return on_control(p, len);
  if (kind == GOAWAY) exit(0);
  if (kind == OPEN) return send_now(RESET, id, "unsupported stream kind", 23);
  struct conn *c = find(id);
  if (!c) return; /* a stream this side already finished */
  if (kind == DATA) {
    write_all(c->fd, p, len);
    c->bytes_out += len;
    if ((c->consumed += len) >= WINDOW / 4) {
      uint8_t grant[4];
      put32(grant, c->consumed);
      c->consumed = 0;
      send_now(CREDIT, id, grant, 4);
    }
  } else if (kind == CREDIT && len == 4) {
    c->credit += get32(p);
    if (c->paused && !c->ended_here) set_reading(c, 1);
  } else if (kind == END) {
    c->ended_there = 1;
    shutdown(c->fd, SHUT_WR);
    if (c->ended_here) finish(c, NULL);
  } else if (kind == RESET) {
    finish(c, NULL);
  }
}

static void on_tunnel_readable(void) {
  ssize_t n = read(tunnel, in + in_len, INBUF - in_len);
  if (n <= 0) exit(n == 0 ? 0 : 1);
  in_len += (size_t)n;
  size_t at = 0;
  while (in_len - at >= 9) {
    uint32_t len = get32(in + at);
    if (len > INBUF - 9) die("frame too large");
    if (in_len - at < 9 + (size_t)len) break;
    on_frame(in[at + 4], get32(in + at + 5), in + at + 9, len);
    at += 9 + len;
  }
  memmove(in, in + at, in_len - at);
  in_len -= at;
}

static void on_client(int fd) {
  uint32_t id = next_id;
  struct conn *c = &conns[(id / 2) & (SLOTS - 1)];
  if (c->fd >= 0) die("too many connections");
  next_id += 2;
  struct sockaddr_in sa;
  socklen_t sl = sizeof sa;
  getpeername(fd, (struct sockaddr *)&sa, &sl);
  *c = (struct conn){.fd = fd, .id = id, .credit = WINDOW, .remote_port = ntohs(sa.sin_port)};
  inet_ntop(AF_INET, &sa.sin_addr, c->remote, sizeof c->remote);
  char open[256], event[512];
  int n = snprintf(open, sizeof open,
                   "{\"kind\":\"incoming\",\"port\":%d,\"mode\":\"steal\",\"remoteAddress\":\"%s\",\"remotePort\":%d",
                   client_port, c->remote, c->remote_port);
  if (reports_streams) n += snprintf(open + n, sizeof open - n, ",\"connId\":\"%d-%u\"", client_port, id / 2);
  n += snprintf(open + n, sizeof open - n, "}");
  size_t at = 0;
  frame(&at, OPEN, id, open, (uint32_t)n);
  if (!reports_streams) frame(&at, CONTROL, 0, event, (uint32_t)traffic(event, sizeof event, c, "open"));
  write_all(tunnel, out, at);
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)TAG_CONN << 32 | id};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
}

static void on_conn_readable(uint32_t id) {
  struct conn *c = find(id);
  if (!c || c->ended_here) return;
  uint32_t room = c->credit < MAX_DATA ? (uint32_t)c->credit : MAX_DATA;
  if (room == 0) return set_reading(c, 0); /* CREDIT resumes it */
  uint8_t *payload = out + 9;
  ssize_t r = read(c->fd, payload, room);
  if (r < 0) return finish(c, "client connection reset");
  if (r == 0) {
    c->ended_here = 1;
    set_reading(c, 0);
    send_now(END, id, NULL, 0);
    if (c->ended_there) finish(c, NULL);
    return;
  }
  c->bytes_in += (uint64_t)r, c->credit -= r;
  put32(out, (uint32_t)r);
  out[4] = DATA;
  put32(out + 5, id);
  write_all(tunnel, out, 9 + (size_t)r);
}

static void watch(int fd, int tag) {
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = (uint64_t)tag << 32};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
}

int main(int argc, char **argv) {
  if (argc != 3) {
    fprintf(stderr, "usage: c-agent <client port> <tunnel port>\n");
    return 2;
  }
  for (int i = 0; i < SLOTS; i++) conns[i].fd = -1;
  ep = epoll_create1(0);
  client_port = atoi(argv[1]);
  listener = listen_on(INADDR_ANY, client_port);
  tunnel_listener = listen_on(INADDR_LOOPBACK, atoi(argv[2]));
  watch(tunnel_listener, TAG_TUNNEL_LISTEN);
  printf("LISTENING\n");
  fflush(stdout);
  for (;;) {
    struct epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, -1);
    for (int i = 0; i < n; i++) {
      int tag = (int)(evs[i].data.u64 >> 32);
      uint32_t id = (uint32_t)evs[i].data.u64;
      if (tag == TAG_TUNNEL_LISTEN) {
        /* One tunnel; clients wait in the backlog until it is there. */
        if (tunnel >= 0 || (tunnel = accept_nodelay(tunnel_listener)) < 0) continue;
        watch(tunnel, TAG_TUNNEL);
        watch(listener, TAG_LISTEN);
      } else if (tag == TAG_TUNNEL) {
        on_tunnel_readable();
      } else if (tag == TAG_LISTEN) {
        int fd = accept_nodelay(listener);
        if (fd < 0) continue;
        on_client(fd);
      } else if (tag == TAG_CONN) {
        on_conn_readable(id);
      }
    }
  }
}
