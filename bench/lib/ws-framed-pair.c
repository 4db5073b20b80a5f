// The floor of bench/steal.ts: devop's stolen path (an agent in the pod, one tunnel, a session process that dials the
// app) as two processes written in C that only relay. The tunnel crosses the same port-forward WebSocket as devop's
// (bench/lib/portforward-relay.ts, the stand-in's pods/portforward): the session side speaks WebSocket to it
// (v4.channel.k8s.io: masked binary messages, a channel byte first, the port in each channel's first message) and the
// relay unwraps onto a TCP connection to the agent side, as kubelet dials the pod's port. Inside the tunnel each client
// connection's bytes travel as [u32 id | u32 length | bytes] frames (length 0: the connection closed); the first frame
// of an id makes the session side dial the app. One epoll loop per process, so a new connection costs what it does in
// devop's shape: a frame and a dial, no process start.
//   ws-framed-pair agent   <client port> <tunnel port>             prints LISTENING
//   ws-framed-pair session <relay port> <tunnel port> <app port>   prints READY once the WebSocket is open
// Writes block: fine for the small requests and answers the bench sends, not for bulk data both ways at once.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include "bench-net.h"

#define SLOTS 65536 /* connections open at once, at most; ids grow, so a late frame never reaches a reused slot */
#define CHUNK (64 * 1024)
#define INBUF (4 * 1024 * 1024)
enum { TAG_LISTEN = 1, TAG_TUNNEL_LISTEN, TAG_TUNNEL, TAG_CONN };

static struct { int fd; uint32_t id; } conns[SLOTS];
static int ep, tunnel = -1, listener = -1, tunnel_listener = -1, session_side, app_port;
static uint32_t next_id = 1;
static uint8_t mask_key[4] = {0x37, 0xfa, 0x21, 0x3d};
static uint8_t raw[INBUF], stream[INBUF];
static size_t raw_len, stream_len;
static int port_seen[2];

static int write_all(int fd, const uint8_t *p, size_t n) {
  while (n > 0) {
    ssize_t w = write(fd, p, n);
    if (w <= 0) return -1;
    p += w;
    n -= (size_t)w;
  }
  return 0;
}

static void watch(int fd, uint64_t tag, uint32_t id) {
  struct epoll_event ev = {.events = EPOLLIN, .data.u64 = tag << 32 | id};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, fd, &ev) < 0) die("epoll_ctl");
}

static int dial(int port) {
  int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                           .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  if (connect(fd, (struct sockaddr *)&sa, sizeof sa) < 0) {
    close(fd);
    return -1;
  }
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}

/** One tunnel frame: plain bytes on the agent side; on the session side one masked message on the data channel. */
static void send_frame(uint32_t id, const uint8_t *data, uint32_t len) {
  static uint8_t out[CHUNK + 32];
  size_t h = 0, k = 0, plen = 1 + 8 + len;
  if (session_side) {
    out[h++] = 0x82; /* FIN, binary */
    if (plen < 126) {
      out[h++] = 0x80 | (uint8_t)plen;
    } else if (plen < 65536) {
      out[h++] = 0x80 | 126, out[h++] = (uint8_t)(plen >> 8), out[h++] = (uint8_t)plen;
    } else {
      out[h++] = 0x80 | 127;
      for (int i = 7; i >= 0; i--) out[h++] = (uint8_t)((uint64_t)plen >> (8 * i));
    }
    memcpy(out + h, mask_key, 4);
    h += 4;
  }
  uint8_t *payload = out + h;
  if (session_side) payload[k++] = 0; /* the data channel of the forwarded port */
  put32(payload + k, id);
  put32(payload + k + 4, len);
  k += 8;
  if (len > 0) memcpy(payload + k, data, len);
  k += len;
  if (session_side)
    for (size_t i = 0; i < k; i++) payload[i] ^= mask_key[i & 3];
  if (write_all(tunnel, out, h + k) < 0) die("tunnel write");
}

static void close_conn(int slot, int tell) {
  close(conns[slot].fd);
  conns[slot].fd = -1;
  if (tell) send_frame(conns[slot].id, NULL, 0);
}

static void add_conn(uint32_t id, int fd) {
  int slot = id & (SLOTS - 1);
  if (conns[slot].fd >= 0) {
    fprintf(stderr, "more than %d connections open\n", SLOTS);
    exit(1);
  }
  conns[slot].fd = fd, conns[slot].id = id;
  watch(fd, TAG_CONN, id);
}

static void on_frame(uint32_t id, const uint8_t *data, uint32_t len) {
  int slot = id & (SLOTS - 1);
  if (conns[slot].fd >= 0 && conns[slot].id == id) {
    if (len == 0) close_conn(slot, 0);
    else if (write_all(conns[slot].fd, data, len) < 0) close_conn(slot, 1);
    return;
  }
  if (len == 0 || !session_side) return; /* a connection this side already closed */
  int fd = dial(app_port);
  if (fd < 0) {
    send_frame(id, NULL, 0);
    return;
  }
  add_conn(id, fd);
  if (write_all(fd, data, len) < 0) close_conn(slot, 1);
}

/** Hands every whole tunnel frame in `stream` to on_frame. */
static void take_frames(void) {
  size_t at = 0;
  while (stream_len - at >= 8) {
    uint32_t len = get32(stream + at + 4);
    if (len > INBUF - 8) die("tunnel frame too large");
    if (stream_len - at < 8 + (size_t)len) break;
    on_frame(get32(stream + at), stream + at + 8, len);
    at += 8 + len;
  }
  memmove(stream, stream + at, stream_len - at);
  stream_len -= at;
}

static void append_stream(const uint8_t *p, size_t n) {
  if (stream_len + n > INBUF) die("tunnel buffer full");
  memcpy(stream + stream_len, p, n);
  stream_len += n;
}

/** Session side: unwraps whole WebSocket messages in `raw` (server frames are not masked) onto `stream`. */
static void take_messages(void) {
  size_t at = 0;
  for (;;) {
    size_t avail = raw_len - at, h = 2;
    if (avail < 2) break;
    uint8_t op = raw[at] & 0x0f;
    uint64_t len = raw[at + 1] & 0x7f;
    if (len == 126) {
      if (avail < 4) break;
      len = (uint64_t)raw[at + 2] << 8 | raw[at + 3], h = 4;
    } else if (len == 127) {
      if (avail < 10) break;
      len = 0;
      for (int i = 0; i < 8; i++) len = len << 8 | raw[at + 2 + i];
      h = 10;
    }
    if (len > INBUF) die("WebSocket message too large");
    if (avail < h + len) break;
    const uint8_t *p = raw + at + h;
    if (op == 8) exit(0); /* the relay closed the tunnel */
    if ((op == 2 || op == 0) && len > 0 && p[0] < 2) {
      size_t skip = 1;
      if (!port_seen[p[0]]) skip += 2, port_seen[p[0]] = 1; /* each channel opens with its port number */
      if (len > skip) {
        if (p[0] == 1) {
          fprintf(stderr, "port-forward error: %.*s\n", (int)(len - skip), p + skip);
          exit(1);
        }
        append_stream(p + skip, len - skip);
      }
    }
    at += h + len;
  }
  memmove(raw, raw + at, raw_len - at);
  raw_len -= at;
}

static void on_tunnel_readable(void) {
  uint8_t *to = session_side ? raw + raw_len : stream + stream_len;
  size_t room = INBUF - (session_side ? raw_len : stream_len);
  ssize_t n = read(tunnel, to, room);
  if (n <= 0) exit(n == 0 ? 0 : 1);
  if (session_side) {
    raw_len += (size_t)n;
    take_messages();
  } else {
    stream_len += (size_t)n;
  }
  take_frames();
}

static void open_websocket(int relay_port, int tunnel_port) {
  tunnel = dial(relay_port);
  if (tunnel < 0) die("connect to the relay");
  char req[512];
  int n = snprintf(req, sizeof req,
                   "GET /api/v1/namespaces/bench/pods/floor/portforward?ports=%d HTTP/1.1\r\nHost: 127.0.0.1:%d\r\n"
                   "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n"
                   "Sec-WebSocket-Version: 13\r\nSec-WebSocket-Protocol: v4.channel.k8s.io\r\n\r\n",
                   tunnel_port, relay_port);
  if (write_all(tunnel, (uint8_t *)req, (size_t)n) < 0) die("handshake");
  for (;;) {
    ssize_t r = read(tunnel, raw + raw_len, INBUF - raw_len - 1);
    if (r <= 0) die("handshake answer");
    raw_len += (size_t)r;
    raw[raw_len] = 0;
    char *end = strstr((char *)raw, "\r\n\r\n");
    if (!end) continue;
    if (strncmp((char *)raw, "HTTP/1.1 101", 12) != 0) {
      fprintf(stderr, "the relay refused the WebSocket: %.*s\n", (int)(end - (char *)raw), raw);
      exit(1);
    }
    size_t head = (size_t)(end + 4 - (char *)raw);
    memmove(raw, raw + head, raw_len - head); /* messages that came with the answer */
    raw_len -= head;
    return;
  }
}

int main(int argc, char **argv) {
  session_side = argc == 5 && strcmp(argv[1], "session") == 0;
  if (!session_side && !(argc == 4 && strcmp(argv[1], "agent") == 0)) {
    fprintf(stderr, "usage: ws-framed-pair agent <client port> <tunnel port>\n"
                    "       ws-framed-pair session <relay port> <tunnel port> <app port>\n");
    return 2;
  }
  for (int i = 0; i < SLOTS; i++) conns[i].fd = -1;
  ep = epoll_create1(0);
  if (session_side) {
    app_port = atoi(argv[4]);
    open_websocket(atoi(argv[2]), atoi(argv[3]));
    watch(tunnel, TAG_TUNNEL, 0);
    printf("READY\n");
    take_messages();
    take_frames();
  } else {
    listener = listen_on(INADDR_ANY, atoi(argv[2]));
    tunnel_listener = listen_on(INADDR_LOOPBACK, atoi(argv[3]));
    watch(tunnel_listener, TAG_TUNNEL_LISTEN, 0);
    printf("LISTENING\n");
  }
  fflush(stdout);
  static uint8_t buf[CHUNK];
  for (;;) {
    struct epoll_event evs[64];
    int n = epoll_wait(ep, evs, 64, -1);
    if (n < 0) continue;
    for (int i = 0; i < n; i++) {
      uint64_t tag = evs[i].data.u64 >> 32;
      uint32_t id = (uint32_t)evs[i].data.u64;
      if (tag == TAG_TUNNEL_LISTEN) {
        /* One tunnel; clients are accepted once it is there (until then they wait in the backlog). */
        if (tunnel >= 0 || (tunnel = accept_nodelay(tunnel_listener)) < 0) continue;
        watch(tunnel, TAG_TUNNEL, 0);
        watch(listener, TAG_LISTEN, 0);
      } else if (tag == TAG_TUNNEL) {
        on_tunnel_readable();
      } else if (tag == TAG_LISTEN) {
        int fd = accept_nodelay(listener);
        if (fd < 0) continue;
        add_conn(next_id++, fd);
      } else if (tag == TAG_CONN) {
        int slot = id & (SLOTS - 1);
        if (conns[slot].fd < 0 || conns[slot].id != id) continue;
        ssize_t r = read(conns[slot].fd, buf, sizeof buf);
        if (r <= 0) close_conn(slot, 1);
        else send_frame(id, buf, (uint32_t)r);
      }
    }
  }
}
