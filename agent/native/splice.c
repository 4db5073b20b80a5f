// devop-splice: the agent's native data path for whole steals and outgoing connections. The agent stays in control: it
// points a port's redirect rule at a listener of this process, and from then on this process moves the stolen
// connections' bytes to and from the session's CLI over a tunnel of devop's own mux framing (docs/protocol.md), where
// Node (agent/incoming/port-redirect.ts) spends ~0.9 ms of CPU per new connection. The CLI's own `outgoing` streams to
// IPv4 addresses connect from here too, in the pod's netns as agent/outgoing/connect.ts serveOutgoing does; any other
// stream the CLI opens is reset with EINVAL (the CLI sends those to the Node agent). One epoll loop, non-blocking
// sockets, no threads.
//
//   devop-splice TUNNEL_PORT    listens on 127.0.0.1:TUNNEL_PORT (0: any) and prints `ready <port>`
//
// Tunnel connections come from CLIs (through a port-forward); each first sends CONTROL {"type":"nativeJoin","token"}
// and is bound to that session, or refused. Requests on stdin, one answer line each on stdout, in order:
//
//   session TOKEN                  → ok             a session with this token may join
//   end TOKEN                      → ok             its tunnel closes (GOAWAY), its sockets close, its steals go
//   steal KEY TOKEN PORT SUBID     → ok LISTENPORT  every connection to LISTENPORT becomes an incoming stream of
//                                                   port PORT on TOKEN's tunnel (SUBID `-`: no subscriptionId);
//                                                   while no tunnel is joined, it goes on to the pod's app at PORT
//   unsteal KEY                    → ok             accepts what is queued, then closes that listener
//   drop KEY                       → ok             closes that listener and the connections it took (the steal
//                                                   ended: as the agent closes its own listener's)
//   anything else, or a failure    → error WHY
//
// Event lines, between answers: `joined TOKEN` (a tunnel joined) and `left TOKEN` (it went: GOAWAY, EOF, an error).
// It ends with exit 0 when stdin (a pipe from the agent) closes, and with the agent however it ends (PDEATHSIG).
// DEVOP_SPLICE_CONNECT_TIMEOUT_MS, when set, replaces the 10 s an outgoing connect may take (tests wait less).
// One file, longer than most, because the agent image and scripts/build.mjs compile each helper from one source.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

// ---- the wire (shared/codec.ts, shared/mux.ts, shared/mux-stream.ts) ----

enum { CONTROL, OPEN, DATA, CREDIT, END, RESET, ACCEPT, GOAWAY };
#define HEADER 9
#define MAX_DATA_FRAME (64 * 1024)
// The largest frame taken from a CLI. codec.ts lets a decoder choose any limit of at least MAX_DATA_FRAME; a CLI sends
// nothing larger here (DATA is cut at 64 KiB, nativeJoin and ping are tiny), and it bounds a tunnel's input buffer.
#define MAX_FRAME MAX_DATA_FRAME
#define MAX_REASON 1024
#define INITIAL_WINDOW (256 * 1024)
#define MAX_WINDOW (32 * 1024 * 1024)
#define WINDOW_BUDGET (64 * 1024 * 1024)
#define MAX_STREAMS 10000
// The window policy's constants, as mux-stream.ts names and explains them.
#define CREDIT_UPDATE_DIVISOR 4
#define GROWTH_ROUND_TRIPS 2
#define GROWTH_FACTOR 4
#define MAX_GROWTH_STEP 64

// ---- this process's bounds ----

// Clients are not read while a tunnel holds this much unsent (1 MiB: a few round trips of a port-forward's worth), and
// are read again once it is down to a quarter: a slow tunnel pushes back on every client, not on this process' memory.
#define OUT_PAUSE (1024 * 1024)
#define OUT_RESUME (256 * 1024)
// Past this the tunnel itself is not read: only its own answers (CREDIT, pong) could pile up so far, from a CLI that
// sends and does not read.
#define OUT_STOP_TUNNEL (4 * 1024 * 1024)
// What an idle tunnel keeps of its output buffer (freed beyond): enough for a burst of frames without a realloc.
#define OUT_KEEP (256 * 1024)
// One read takes several frames; a partial frame (at most MAX_FRAME + HEADER) always fits behind what was parsed.
#define IN_BUFFER (4 * (MAX_FRAME + HEADER))
#define STREAM_BUCKETS 4096
#define MAX_NAME 64
#define MAX_SUBID 200
#define MAX_REQUEST 512
#define BACKLOG 1024
// How long an outgoing connect may take before it fails with ETIMEDOUT: Node's (agent/outgoing/connect.ts
// CONNECT_TIMEOUT_MS).
#define CONNECT_TIMEOUT_MS 10000
// "255.255.255.255:65535" and its NUL: an outgoing stream's destination, as its failure reasons name it.
#define MAX_DEST 22
// Why any other stream the CLI opens is reset: a CLI sends this path IPv4 addresses only, the rest to the Node agent.
#define OUTGOING_ONLY "EINVAL: the native path connects to IPv4 addresses only"
// What a connection passed to the pod's app holds each way (struct pass): one socket read.
#define PASS_BUFFER (64 * 1024)

static const char *const TOKEN_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_-";
static const char *const KEY_CHARS = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789_.-";

// ---- what the loop watches ----

enum role { ROLE_STDIN, ROLE_TUNNEL_LISTENER, ROLE_TUNNEL, ROLE_STEAL, ROLE_CLIENT, ROLE_PASS };

// The head of everything registered with epoll. An object that ends during a batch of events is only marked dead and
// freed after the batch (later events of the batch may still point at it).
struct watched {
  enum role role;
  int fd;
  int dead;
  int registered;
  uint32_t events;
  struct watched *grave_next;
};

// Bytes at data[head, head + len).
struct buf {
  uint8_t *data;
  size_t head, len, cap;
};

struct tunnel;

// One stream on a tunnel and its socket (the "client"): a stolen connection (incoming) or one this process made for the
// CLI (outgoing).
struct stream {
  struct watched w;
  struct tunnel *t;
  uint32_t id;
  struct stream *bucket_next, *wait_prev, *wait_next;
  int waiting;      // on t's waiting list: not read until the tunnel's output drains
  int ended_here;   // the client's EOF became END
  int ended_there;  // the CLI's END came
  int shut;         // ... and reached the client as a FIN
  int hup;          // the socket hung up: it leaves epoll while nothing is to be done with it
  // An outgoing stream's connect is in flight (on the connects list, until its deadline): the socket is not read, and
  // what the CLI sends waits in to_client.
  int connecting;
  double connect_deadline;
  struct stream *connect_prev, *connect_next;
  char dest[MAX_DEST];  // an outgoing stream's host:port
  unsigned long long steal_id;  // an incoming stream's steal (its id), 0 for an outgoing one
  int64_t send_credit;
  struct buf to_client;  // from the CLI, not yet taken by the client socket: at most the window
  // Receive side: what the CLI sent, what it may send (granted), and the window growth of mux-stream.ts (maybe_grow).
  int64_t recv_total, recv_granted, window;
  double epoch_at, burst_at, last_grant_at, probe_at;
  int64_t epoch_consumed, epoch_received, epoch_window, burst_consumed, last_grant_consumed, probe_limit;
};

// One CLI session's tunnel connection.
struct tunnel {
  struct watched w;
  struct tunnel *next;
  struct session *session;  // NULL until it joined
  uint8_t *in;
  size_t in_len;
  struct buf out;
  struct stream *buckets[STREAM_BUCKETS];
  struct stream *waiting;
  int streams;
  uint64_t next_id;
  uint32_t last_peer_id;
  int64_t budget_left;  // what its streams' windows may still grow by, together
  double min_rtt;       // ms, the shortest credit round trip seen; < 0 before the first
};

struct session {
  char token[MAX_NAME + 1];
  struct tunnel *tunnel;
  struct session *next;
};

struct steal {
  struct watched w;
  char key[MAX_NAME + 1];
  struct session *session;
  int port;
  char subid[MAX_SUBID + 1];  // empty: none
  unsigned long long id;      // what its streams name it by (drop)
  struct steal *next;
};

// A stolen connection that came while its session had no tunnel joined (the CLI went without a word, or its native
// connection dropped, and the agent has not moved the port's rule back yet): relayed to the pod's app, as the agent's
// own listener passes a connection on while its session is away. Its two sockets, end[0] the client's and end[1] the
// app's, each with the bytes read from it that the other has not taken yet (at most PASS_BUFFER).
struct pass_end {
  struct watched w;
  struct pass *p;
  uint8_t buf[PASS_BUFFER];
  size_t len;
  int eof;   // read its FIN
  int shut;  // the other end's FIN reached it (shutdown)
};
struct pass {
  struct pass_end end[2];
  int connecting;  // the app's socket is connecting: the client is not read yet
};

static int ep;
static struct watched stdin_watch = {.role = ROLE_STDIN, .fd = STDIN_FILENO};
static struct watched tunnel_listener = {.role = ROLE_TUNNEL_LISTENER};
static struct tunnel *tunnels;
static struct session *sessions;
static struct steal *steals;
static struct watched *graveyard;
// Stolen connections so far, over all steals: the n in connId `PORT-nN` (never reused while the process lives).
static unsigned long long connections;
// Steals so far: each one's id.
static unsigned long long steal_ids;
// Outgoing connects in flight, oldest first: the order of their deadlines, each the same time after its start.
static struct stream *connects_first, *connects_last;
static double connect_timeout_ms = CONNECT_TIMEOUT_MS;
// Held open so that a listener out of file descriptors can still take a connection off its queue and refuse it.
static int spare_fd = -1;

// ---- small things ----

static void fatal(const char *what) {
  fprintf(stderr, "devop-splice: %s: %s\n", what, strerror(errno));
  exit(1);
}

static double now_ms(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return ts.tv_sec * 1000.0 + ts.tv_nsec / 1e6;
}

// A one-line reason, valid until the next call.
__attribute__((format(printf, 1, 2))) static const char *because(const char *format, ...) {
  static char why[160];
  va_list args;
  va_start(args, format);
  vsnprintf(why, sizeof why, format, args);
  va_end(args);
  return why;
}

static int64_t min64(int64_t a, int64_t b) { return a < b ? a : b; }

static void put32(uint8_t *p, uint32_t v) { p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v; }
static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static void nodelay(int fd) {
  int one = 1;
  setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
}

// Closes with RST rather than FIN: the client learns its connection was cut, not that it ended.
static void close_rst(int fd) {
  struct linger hard = {.l_onoff = 1, .l_linger = 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(fd);
}

static int valid_name(const char *s, const char *chars) {
  size_t n = strlen(s);
  return n >= 1 && n <= MAX_NAME && strspn(s, chars) == n;
}

// Compares in constant time, as the agent checks its hello tokens (shared/handshake.ts).
static int same_token(const char *a, const char *b) {
  size_t na = strlen(a), nb = strlen(b);
  unsigned diff = na != nb;
  for (size_t i = 0; i < MAX_NAME; i++) diff |= (unsigned)(i < na ? a[i] : 0) ^ (unsigned)(i < nb ? b[i] : 0);
  return diff == 0;
}

static uint8_t *buf_room(struct buf *b, size_t n) {
  if (b->cap - b->head - b->len >= n) return b->data + b->head + b->len;
  if (b->head > 0) {
    memmove(b->data, b->data + b->head, b->len);
    b->head = 0;
  }
  if (b->cap - b->len < n) {
    size_t cap = b->cap ? b->cap : 16 * 1024;
    while (cap - b->len < n) cap *= 2;
    uint8_t *data = realloc(b->data, cap);
    if (!data) fatal("out of memory");
    b->data = data, b->cap = cap;
  }
  return b->data + b->len;
}

static void buf_append(struct buf *b, const void *p, size_t n) {
  memcpy(buf_room(b, n), p, n);
  b->len += n;
}

// Takes n bytes off the front; an empty buffer larger than `keep` is freed (idle streams hold no memory).
static void buf_drop(struct buf *b, size_t n, size_t keep) {
  b->head += n, b->len -= n;
  if (b->len > 0) return;
  b->head = 0;
  if (b->cap > keep) {
    free(b->data);
    b->data = NULL, b->cap = 0;
  }
}

// ---- epoll ----

static void watch(struct watched *w, uint32_t events) {
  if (w->registered && w->events == events) return;
  struct epoll_event ev = {.events = events, .data.ptr = w};
  if (epoll_ctl(ep, w->registered ? EPOLL_CTL_MOD : EPOLL_CTL_ADD, w->fd, &ev) < 0) fatal("epoll_ctl");
  w->registered = 1, w->events = events;
}

static void unwatch(struct watched *w) {
  if (w->registered) epoll_ctl(ep, EPOLL_CTL_DEL, w->fd, NULL);
  w->registered = 0;
}

static void bury(struct watched *w) {
  w->dead = 1;
  w->grave_next = graveyard;
  graveyard = w;
}

static void free_graveyard(void) {
  while (graveyard) {
    struct watched *w = graveyard;
    graveyard = w->grave_next;
    if (w->role == ROLE_TUNNEL) {
      free(((struct tunnel *)w)->in);
      free(((struct tunnel *)w)->out.data);
    } else if (w->role == ROLE_CLIENT) {
      free(((struct stream *)w)->to_client.data);
    }
    free(w);
  }
}

// ---- the tunnel's output ----

static void frame(struct tunnel *t, int kind, uint32_t id, const void *payload, size_t len) {
  uint8_t *p = buf_room(&t->out, HEADER + len);
  put32(p, (uint32_t)len);
  p[4] = (uint8_t)kind;
  put32(p + 5, id);
  if (len) memcpy(p + HEADER, payload, len);
  t->out.len += HEADER + len;
}

static void frame_text(struct tunnel *t, int kind, uint32_t id, const char *text) {
  size_t n = strlen(text);
  frame(t, kind, id, text, n < MAX_REASON ? n : MAX_REASON);
}

static void tunnel_interest(struct tunnel *t) {
  uint32_t events = t->out.len > OUT_STOP_TUNNEL ? 0 : EPOLLIN;
  watch(&t->w, events | (t->out.len > 0 ? EPOLLOUT : 0));
}

static void stream_interest(struct stream *s);
static void tunnel_close(struct tunnel *t, const char *goaway, int announce);

// Clients that stopped for a full tunnel are read again.
static void wake_waiting(struct tunnel *t) {
  struct stream *s = t->waiting;
  t->waiting = NULL;
  while (s) {
    struct stream *next = s->wait_next;
    s->waiting = 0, s->wait_prev = s->wait_next = NULL;
    stream_interest(s);
    s = next;
  }
}

static void flush(struct tunnel *t) {
  while (t->out.len > 0) {
    ssize_t n = send(t->w.fd, t->out.data + t->out.head, t->out.len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) {
      fprintf(stderr, "devop-splice: tunnel write failed: %s\n", strerror(errno));
      tunnel_close(t, NULL, 1);
      return;
    }
    buf_drop(&t->out, (size_t)n, OUT_KEEP);
  }
  tunnel_interest(t);
  if (t->out.len <= OUT_RESUME && t->waiting) wake_waiting(t);
}

// What this round of events made leaves now, one write per tunnel: a new connection's OPEN with its first bytes, the
// CREDIT for all the DATA of one read. A tunnel waiting for EPOLLOUT is flushed by that event instead.
static void flush_tunnels(void) {
  for (struct tunnel *t = tunnels, *next; t; t = next) {
    next = t->next;
    if (t->out.len > 0 && !(t->w.events & EPOLLOUT)) flush(t);
  }
}

// ---- streams ----

static struct stream **bucket_of(struct tunnel *t, uint32_t id) { return &t->buckets[(id >> 1) % STREAM_BUCKETS]; }

static struct stream *find_stream(struct tunnel *t, uint32_t id) {
  struct stream *s = *bucket_of(t, id);
  while (s && s->id != id) s = s->bucket_next;
  return s;
}

static int can_read(const struct stream *s) {
  return !s->ended_here && s->send_credit > 0 && !s->waiting && !s->connecting;
}

// A socket that hung up with nothing left to do leaves epoll (it would report the hang-up in every round); a stalled
// one stays with no events, so that a client's RST is still seen as EPOLLERR. A connect ends with EPOLLOUT.
static void stream_interest(struct stream *s) {
  uint32_t events = (can_read(s) ? EPOLLIN : 0) | (s->to_client.len > 0 || s->connecting ? EPOLLOUT : 0);
  if (events == 0 && s->hup) unwatch(&s->w);
  else watch(&s->w, events);
}

static void connect_started(struct stream *s) {
  s->connecting = 1;
  s->connect_deadline = now_ms() + connect_timeout_ms;
  s->connect_prev = connects_last;
  if (connects_last) connects_last->connect_next = s;
  else connects_first = s;
  connects_last = s;
}

static void connect_ended(struct stream *s) {
  if (s->connect_prev) s->connect_prev->connect_next = s->connect_next;
  else connects_first = s->connect_next;
  if (s->connect_next) s->connect_next->connect_prev = s->connect_prev;
  else connects_last = s->connect_prev;
  s->connecting = 0, s->connect_prev = s->connect_next = NULL;
}

static void stream_free(struct stream *s, int rst) {
  struct tunnel *t = s->t;
  if (s->connecting) connect_ended(s);
  struct stream **p = bucket_of(t, s->id);
  while (*p != s) p = &(*p)->bucket_next;
  *p = s->bucket_next;
  if (s->waiting) {
    if (s->wait_prev) s->wait_prev->wait_next = s->wait_next;
    else t->waiting = s->wait_next;
    if (s->wait_next) s->wait_next->wait_prev = s->wait_prev;
  }
  t->budget_left += s->window - INITIAL_WINDOW;
  t->streams--;
  if (rst) close_rst(s->w.fd);
  else close(s->w.fd);
  bury(&s->w);
}

static void stream_reset(struct stream *s, const char *reason) {
  frame_text(s->t, RESET, s->id, reason);
  stream_free(s, 1);
}

static const char *client_failure(int err) {
  if (err == ECONNRESET) return "client connection reset";
  if (err == EPIPE) return "client connection closed";
  return because("client connection failed: %s", strerror(err));
}

static void maybe_finish(struct stream *s) {
  if (s->ended_here && s->ended_there && s->shut) stream_free(s, 0);
}

// The receive window grows as MuxStream.grantCredit grows it (shared/mux-stream.ts, docs/protocol.md "Flow control"),
// so that a download over a long path is not held to one 256 KiB window per round trip. Per epoch of at least one
// credit round trip (the tunnel keeps the shortest seen, timed from a CREDIT to the first byte beyond the limit before
// it), decided at the next CREDIT: if the client took at least half the window the CLI could use per round trip, the
// window, not the client, limited the stream, and it grows fourfold, or to twice the bandwidth-delay product estimated
// from how long the last burst took to drain (at most 64× in one step), up to MAX_WINDOW and within the tunnel's
// WINDOW_BUDGET. An epoch whose path delivered and client took half that window is decided at once. A slow or stalled
// client never takes that much, so its window, and what the CLI can make this process hold, stays as it is.
static void maybe_grow(struct stream *s, int64_t consumed, double now) {
  double rtt = s->t->min_rtt;
  if (rtt < 0) return;
  double elapsed = now - s->epoch_at, half = (double)s->epoch_window / GROWTH_ROUND_TRIPS;
  double end_at = s->last_grant_at;
  int64_t end_consumed = s->last_grant_consumed;
  int fast;
  if (elapsed < rtt) {
    if (consumed - s->epoch_consumed < half || s->recv_total - s->epoch_received < half) return;
    fast = 1, end_at = now, end_consumed = consumed;
  } else {
    fast = (double)(consumed - s->epoch_consumed) * GROWTH_ROUND_TRIPS * rtt >= (double)s->epoch_window * elapsed;
  }
  double span = end_at - s->burst_at, burst = s->burst_at < 0 ? 0 : (double)(end_consumed - s->burst_consumed);
  double bdp = burst <= 0 ? 0 : span > 0 ? burst * rtt / span : 1e18;
  s->epoch_at = now, s->epoch_consumed = consumed, s->epoch_received = s->recv_total;
  s->epoch_window = s->window, s->burst_at = -1;
  if (!fast || s->window >= MAX_WINDOW) return;
  double by_bdp = 2 * bdp < (double)s->window * MAX_GROWTH_STEP ? 2 * bdp : (double)s->window * MAX_GROWTH_STEP;
  int64_t target = s->window * GROWTH_FACTOR > (int64_t)by_bdp ? s->window * GROWTH_FACTOR : (int64_t)by_bdp;
  int64_t grow = min64(min64(target, MAX_WINDOW) - s->window, s->t->budget_left);
  s->t->budget_left -= grow;
  s->window += grow;
}

// Keeps the CLI's credit at one window beyond what the client socket took, updated once a quarter window was taken.
static void grant_credit(struct stream *s) {
  if (s->ended_there) return;
  int64_t consumed = s->recv_total - (int64_t)s->to_client.len;
  if (consumed + s->window - s->recv_granted < s->window / CREDIT_UPDATE_DIVISOR) return;
  double now = now_ms();
  maybe_grow(s, consumed, now);
  if (s->burst_at < 0) s->burst_at = now, s->burst_consumed = consumed;
  s->last_grant_at = now, s->last_grant_consumed = consumed;
  if (s->probe_limit < 0) s->probe_limit = s->recv_granted, s->probe_at = now;
  uint8_t due[4];
  put32(due, (uint32_t)(consumed + s->window - s->recv_granted));
  s->recv_granted = consumed + s->window;
  frame(s->t, CREDIT, s->id, due, 4);
}

// After the client socket took bytes: its FIN once the CLI ended and nothing is left (not before a connect is done:
// shutdown() would abort it), the CLI's credit, the end.
static void after_client_write(struct stream *s) {
  if (s->to_client.len == 0 && s->ended_there && !s->shut && !s->connecting) {
    shutdown(s->w.fd, SHUT_WR);
    s->shut = 1;
  }
  grant_credit(s);
  stream_interest(s);
  maybe_finish(s);
}

// Writes what waits for the client; 0, or -1 when that reset the stream.
static int write_to_client(struct stream *s) {
  while (s->to_client.len > 0) {
    ssize_t n = send(s->w.fd, s->to_client.data + s->to_client.head, s->to_client.len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) break;
    if (n < 0) {
      stream_reset(s, client_failure(errno));
      return -1;
    }
    buf_drop(&s->to_client, (size_t)n, 0);
  }
  after_client_write(s);
  return 0;
}

// DATA from the CLI: straight to the client socket, what it does not take waits, within the window. While the socket
// connects all of it waits: a send() would take a failed connect's error as its own. Returns a protocol error, or NULL.
static const char *deliver(struct stream *s, const uint8_t *p, uint32_t len) {
  if (s->ended_there || len == 0) return NULL;
  s->recv_total += len;
  if (s->probe_limit >= 0 && s->recv_total > s->probe_limit) {
    // Bytes beyond the limit before a grant were sent after that grant reached the CLI: one credit round trip.
    double rtt = now_ms() - s->probe_at;
    if (s->t->min_rtt < 0 || rtt < s->t->min_rtt) s->t->min_rtt = rtt;
    s->probe_limit = -1;
  }
  if (s->recv_total > s->recv_granted) return "flow control violated: DATA beyond the credit granted";
  if (s->to_client.len == 0 && !s->connecting) {
    ssize_t n = send(s->w.fd, p, len, MSG_NOSIGNAL);
    if (n < 0 && errno != EAGAIN && errno != EINTR) {
      stream_reset(s, client_failure(errno));
      return NULL;
    }
    if (n > 0) p += n, len -= (uint32_t)n;
  }
  if (len > 0) buf_append(&s->to_client, p, len);
  after_client_write(s);
  return NULL;
}

static void wait_for_tunnel(struct stream *s) {
  s->waiting = 1;
  s->wait_prev = NULL;
  s->wait_next = s->t->waiting;
  if (s->wait_next) s->wait_next->wait_prev = s;
  s->t->waiting = s;
  stream_interest(s);
}

static void client_ended(struct stream *s) {
  s->ended_here = 1;
  frame(s->t, END, s->id, NULL, 0);
  stream_interest(s);
  maybe_finish(s);
}

// One read from the client, straight into the tunnel's output as a DATA frame, within the CLI's credit.
static void read_client(struct stream *s) {
  struct tunnel *t = s->t;
  if (t->out.len >= OUT_PAUSE) return wait_for_tunnel(s);
  size_t room = (size_t)min64(s->send_credit, MAX_DATA_FRAME);
  uint8_t *p = buf_room(&t->out, HEADER + room);
  ssize_t n = recv(s->w.fd, p + HEADER, room, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n < 0) return stream_reset(s, client_failure(errno));
  if (n == 0) return client_ended(s);
  put32(p, (uint32_t)n);
  p[4] = DATA;
  put32(p + 5, s->id);
  t->out.len += HEADER + (size_t)n;
  s->send_credit -= n;
  if (s->send_credit == 0) stream_interest(s);
}

static void on_connect(struct stream *s, uint32_t events);

static void on_client(struct stream *s, uint32_t events) {
  if (s->connecting) return on_connect(s, events);
  if (events & EPOLLERR) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(s->w.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    return stream_reset(s, client_failure(err ? err : ECONNRESET));
  }
  if ((events & EPOLLOUT) && write_to_client(s) < 0) return;
  if (s->w.dead || !(events & (EPOLLIN | EPOLLHUP))) return;
  if (can_read(s)) return read_client(s);
  if (events & EPOLLHUP) s->hup = 1;
  stream_interest(s);
}

// ---- addresses of both families ----

// An IPv4 peer of a dual-stack socket (::ffff:a.b.c.d) as the IPv4 address it is, so it is printed and dialled as one.
static void unmap_ipv4(struct sockaddr_storage *ss) {
  const struct sockaddr_in6 *six = (const struct sockaddr_in6 *)ss;
  if (ss->ss_family != AF_INET6 || !IN6_IS_ADDR_V4MAPPED(&six->sin6_addr)) return;
  struct sockaddr_in four = {.sin_family = AF_INET, .sin_port = six->sin6_port};
  memcpy(&four.sin_addr, &six->sin6_addr.s6_addr[12], 4);
  memcpy(ss, &four, sizeof four);
}

static socklen_t address_length(const struct sockaddr_storage *ss) {
  return ss->ss_family == AF_INET6 ? sizeof(struct sockaddr_in6) : sizeof(struct sockaddr_in);
}

static void set_port(struct sockaddr_storage *ss, int port) {
  if (ss->ss_family == AF_INET6) ((struct sockaddr_in6 *)ss)->sin6_port = htons((uint16_t)port);
  else ((struct sockaddr_in *)ss)->sin_port = htons((uint16_t)port);
}

// The address as text (IPv6 without brackets, as Node's remoteAddress); returns the port.
static int address_text(const struct sockaddr_storage *ss, char *text, size_t size) {
  if (ss->ss_family == AF_INET6) {
    const struct sockaddr_in6 *six = (const struct sockaddr_in6 *)ss;
    inet_ntop(AF_INET6, &six->sin6_addr, text, (socklen_t)size);
    return ntohs(six->sin6_port);
  }
  const struct sockaddr_in *four = (const struct sockaddr_in *)ss;
  inet_ntop(AF_INET, &four->sin_addr, text, (socklen_t)size);
  return ntohs(four->sin_port);
}

// A stream of t with its socket, each side's credit at the initial window.
static struct stream *stream_new(struct tunnel *t, uint32_t id, int fd) {
  struct stream *s = calloc(1, sizeof *s);
  if (!s) fatal("out of memory");
  *s = (struct stream){.w = {.role = ROLE_CLIENT, .fd = fd}, .t = t, .id = id};
  s->send_credit = s->recv_granted = s->window = s->epoch_window = INITIAL_WINDOW;
  s->epoch_at = now_ms(), s->burst_at = -1, s->probe_limit = -1;
  struct stream **b = bucket_of(t, id);
  s->bucket_next = *b, *b = s;
  t->streams++;
  return s;
}

// A stolen connection becomes a stream: its OPEN, and the client's first bytes if they are there already, leave
// together at the end of this round.
static void stream_open(struct tunnel *t, int fd, const struct sockaddr_storage *peer, const struct steal *st) {
  struct stream *s = stream_new(t, (uint32_t)t->next_id, fd);
  s->steal_id = st->id;
  t->next_id += 2;
  char ip[INET6_ADDRSTRLEN], subid[MAX_SUBID + 32] = "", open[512];
  int peer_port = address_text(peer, ip, sizeof ip);
  if (st->subid[0]) snprintf(subid, sizeof subid, ",\"subscriptionId\":\"%s\"", st->subid);
  int n = snprintf(open, sizeof open,
                   "{\"kind\":\"incoming\",\"port\":%d,\"mode\":\"steal\",\"remoteAddress\":\"%s\",\"remotePort\":%d%s,"
                   "\"connId\":\"%d-n%llu\"}",
                   st->port, ip, peer_port, subid, st->port, ++connections);
  frame(t, OPEN, s->id, open, (size_t)n);
  stream_interest(s);
  read_client(s);
}

// ---- outgoing streams ----

#define ERRNO_NAME(e) {e, #e}

// Why a connect failed, in the words of Node's net.connect: the CLI reads the errno name before the first colon
// (cli/outgoing/dialer.ts). An errno a connect seldom meets is EIO, with the C library's words for it.
static const char *connect_failure(const char *dest, int err) {
  static const struct {
    int err;
    const char *name;
  } names[] = {
      ERRNO_NAME(ECONNREFUSED), ERRNO_NAME(ECONNRESET),    ERRNO_NAME(EHOSTUNREACH), ERRNO_NAME(ENETUNREACH),
      ERRNO_NAME(ETIMEDOUT),    ERRNO_NAME(EADDRNOTAVAIL), ERRNO_NAME(ENETDOWN),     ERRNO_NAME(EACCES),
      ERRNO_NAME(EPERM),        ERRNO_NAME(EMFILE),        ERRNO_NAME(ENFILE),       ERRNO_NAME(ENOBUFS),
  };
  for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
    if (names[i].err == err) return because("%s: %s: connect %s %s", names[i].name, dest, names[i].name, dest);
  return because("EIO: %s: connect failed: %s", dest, strerror(err));
}

// Connected: ACCEPT with both ends' addresses, as serveOutgoing sends it; then what the CLI sent meanwhile (its END
// too) goes out, and from here on the stream is like any other.
static void connected(struct stream *s) {
  struct sockaddr_in here, there;
  socklen_t here_len = sizeof here, there_len = sizeof there;
  if (getsockname(s->w.fd, (struct sockaddr *)&here, &here_len) < 0 ||
      getpeername(s->w.fd, (struct sockaddr *)&there, &there_len) < 0)
    return stream_reset(s, connect_failure(s->dest, errno));
  connect_ended(s);
  char local[INET_ADDRSTRLEN], remote[INET_ADDRSTRLEN], info[160];
  inet_ntop(AF_INET, &here.sin_addr, local, sizeof local);
  inet_ntop(AF_INET, &there.sin_addr, remote, sizeof remote);
  int n = snprintf(info, sizeof info,
                   "{\"localAddress\":\"%s\",\"localPort\":%d,\"remoteAddress\":\"%s\",\"remotePort\":%d}", local,
                   ntohs(here.sin_port), remote, ntohs(there.sin_port));
  frame(s->t, ACCEPT, s->id, info, (size_t)n);
  write_to_client(s);
}

// A connect's outcome: EPOLLOUT without an error is a connection; an error, or a hang-up without one, is a failure.
static void on_connect(struct stream *s, uint32_t events) {
  int err = 0;
  socklen_t len = sizeof err;
  if (getsockopt(s->w.fd, SOL_SOCKET, SO_ERROR, &err, &len) < 0) err = errno;
  if (!err && (events & EPOLLOUT)) return connected(s);
  stream_reset(s, connect_failure(s->dest, err ? err : ECONNRESET));
}

// The CLI's outgoing stream: a non-blocking connect from this process. Its outcome is the socket's first event
// (on_connect), or its deadline (expire_connects).
static void stream_connect(struct tunnel *t, uint32_t id, const struct sockaddr_in *to) {
  char ip[INET_ADDRSTRLEN], dest[MAX_DEST];
  inet_ntop(AF_INET, &to->sin_addr, ip, sizeof ip);
  snprintf(dest, sizeof dest, "%s:%d", ip, ntohs(to->sin_port));
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return frame_text(t, RESET, id, connect_failure(dest, errno));
  struct stream *s = stream_new(t, id, fd);
  memcpy(s->dest, dest, sizeof dest);
  nodelay(fd);
  if (connect(fd, (const struct sockaddr *)to, sizeof *to) < 0 && errno != EINPROGRESS)
    return stream_reset(s, connect_failure(dest, errno));
  connect_started(s);
  stream_interest(s);
}

// Connects past their deadline fail as Node's do.
static void expire_connects(void) {
  double now = now_ms();
  while (connects_first && connects_first->connect_deadline <= now)
    stream_reset(connects_first, because("ETIMEDOUT: %s: connect timed out", connects_first->dest));
}

// How long the loop may wait for events: past the earliest connect deadline (rounded up), or for ever.
static int wait_ms(void) {
  if (!connects_first) return -1;
  double left = connects_first->connect_deadline - now_ms();
  return left > 0 ? (int)left + 1 : 0;
}

// ---- connections passed to the pod's app (struct pass) ----

static struct pass_end *other_end(struct pass_end *e) { return &e->p->end[e == &e->p->end[0]]; }

// Both sockets close; RST when cut (an error on either side), as the agent's relay destroys both. The pair is one
// allocation, buried once (by its first end): both ends are dead for the rest of the batch.
static void pass_close(struct pass *p, int rst) {
  if (p->end[0].w.dead) return;
  for (int i = 0; i < 2; i++) {
    struct pass_end *e = &p->end[i];
    unwatch(&e->w);
    if (rst) close_rst(e->w.fd);
    else close(e->w.fd);
    e->w.dead = 1;
  }
  bury(&p->end[0].w);
}

// What an end waits for: to read while it has not ended and its buffer has room, to write while the other end's
// buffer holds bytes. An end with neither leaves epoll (a hung-up socket would be reported for ever); when both ends
// are done the pair closes.
static void pass_interest(struct pass *p) {
  int done = 0;
  for (int i = 0; i < 2; i++) {
    struct pass_end *e = &p->end[i], *o = other_end(e);
    uint32_t events = (!e->eof && e->len < PASS_BUFFER && !p->connecting ? EPOLLIN : 0) |
                      (o->len > 0 || (i == 1 && p->connecting) ? EPOLLOUT : 0);
    if (events) watch(&e->w, events);
    else unwatch(&e->w);
    done += e->eof && e->len == 0 && o->shut;
  }
  if (done == 2) pass_close(p, 0);
}

// Moves what `from` holds to the other end, and passes its FIN on once all went. Whether the pair lives on.
static int pass_flush(struct pass_end *from) {
  struct pass_end *to = other_end(from);
  while (from->len > 0) {
    ssize_t n = send(to->w.fd, from->buf, from->len, MSG_NOSIGNAL);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0 && errno == EAGAIN) return 1;
    if (n < 0) return pass_close(from->p, 1), 0;
    memmove(from->buf, from->buf + n, from->len - (size_t)n);
    from->len -= (size_t)n;
  }
  if (from->eof && !to->shut) shutdown(to->w.fd, SHUT_WR), to->shut = 1;
  return 1;
}

static void on_pass(struct pass_end *e, uint32_t events) {
  struct pass *p = e->p;
  if (p->connecting) {
    int err = 0;
    socklen_t len = sizeof err;
    getsockopt(e->w.fd, SOL_SOCKET, SO_ERROR, &err, &len);
    // No app to pass it to: the client is cut, as a connection to a port nothing listens on is.
    if (err || (events & (EPOLLERR | EPOLLHUP))) return pass_close(p, 1);
    p->connecting = 0;
  } else if (events & EPOLLERR) {
    return pass_close(p, 1);
  }
  if ((events & EPOLLOUT) && !pass_flush(other_end(e))) return;
  if (!e->eof && e->len < PASS_BUFFER && (events & (EPOLLIN | EPOLLHUP))) {
    ssize_t n = recv(e->w.fd, e->buf + e->len, PASS_BUFFER - e->len, 0);
    if (n < 0 && errno != EAGAIN && errno != EINTR) return pass_close(p, 1);
    if (n == 0) e->eof = 1;
    if (n > 0) e->len += (size_t)n;
    if (!pass_flush(e)) return;
  }
  pass_interest(p);
}

// Relays `fd` to the port's app at the address the client reached (the pod's: the redirect kept it) and the stolen
// port, from this process in the pod's netns (the redirect rules catch only what comes in, not what starts here).
static void pass_to_app(const struct steal *st, int fd) {
  struct sockaddr_storage app;
  socklen_t len = sizeof app;
  struct pass *p = calloc(1, sizeof *p);
  int to = -1;
  if (p && getsockname(fd, (struct sockaddr *)&app, &len) == 0) {
    unmap_ipv4(&app);
    to = socket(app.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  }
  if (to < 0) {
    free(p);
    return close_rst(fd);
  }
  set_port(&app, st->port);
  nodelay(fd), nodelay(to);
  for (int i = 0; i < 2; i++) p->end[i].w.role = ROLE_PASS, p->end[i].p = p;
  p->end[0].w.fd = fd, p->end[1].w.fd = to, p->connecting = 1;
  if (connect(to, (struct sockaddr *)&app, address_length(&app)) < 0 && errno != EINPROGRESS) return pass_close(p, 1);
  pass_interest(p);
}

// ---- steal listeners ----

// A client while the session has no tunnel goes to the pod's app (pass_to_app); one the tunnel cannot take now (too
// many streams, ids used up) is refused with RST.
static void take_client(struct steal *st, int fd, const struct sockaddr_storage *peer) {
  struct tunnel *t = st->session->tunnel;
  if (!t) return pass_to_app(st, fd);
  if (t->streams >= MAX_STREAMS || t->next_id > UINT32_MAX) return close_rst(fd);
  nodelay(fd);
  stream_open(t, fd, peer, st);
}

// The spare descriptor: an eventfd, which needs no file (a container may have no /dev/null).
static int spare(void) { return eventfd(0, EFD_CLOEXEC); }

// Out of file descriptors, the spare one makes room to take a connection off a listener's queue and refuse it (else
// level-triggered epoll would report the same full queue forever). Whether one was taken.
static int refuse_queued(int listener, const char *what) {
  fprintf(stderr, "devop-splice: %s: out of file descriptors; refusing a connection\n", what);
  close(spare_fd);
  int fd = accept(listener, NULL, NULL);
  if (fd >= 0) close_rst(fd);
  spare_fd = spare();
  return fd >= 0;
}

// Accepts until the queue is empty.
static void accept_clients(struct steal *st) {
  for (;;) {
    struct sockaddr_storage peer;
    socklen_t len = sizeof peer;
    int fd = accept4(st->w.fd, (struct sockaddr *)&peer, &len, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) unmap_ipv4(&peer), take_client(st, fd, &peer);
    else if (errno == EMFILE || errno == ENFILE) {
      if (!refuse_queued(st->w.fd, st->key)) return;
    } else if (errno != EINTR && errno != ECONNABORTED) {
      return;  // EAGAIN: the queue is empty
    }
  }
}

static void steal_close(struct steal *st) {
  for (struct steal **p = &steals; *p; p = &(*p)->next)
    if (*p == st) {
      *p = st->next;
      break;
    }
  close(st->w.fd);
  bury(&st->w);
}

// Binds and listens on `sa` (the port it names, or any when 0) and says which port it got; -1 with errno on failure.
static int bind_listen(int fd, struct sockaddr_storage *sa, int *bound) {
  int one = 1;
  socklen_t len = sizeof *sa;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)sa, address_length(sa)) < 0 || listen(fd, BACKLOG) < 0 ||
      getsockname(fd, (struct sockaddr *)sa, &len) < 0) {
    int err = errno;
    close(fd);
    errno = err;
    return -1;
  }
  char unused[INET6_ADDRSTRLEN];
  *bound = address_text(sa, unused, sizeof unused);
  return fd;
}

static int listen_on(uint32_t addr, int port, int *bound) {
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  struct sockaddr_storage sa = {0};
  struct sockaddr_in *four = (struct sockaddr_in *)&sa;
  four->sin_family = AF_INET, four->sin_port = htons((uint16_t)port), four->sin_addr.s_addr = htonl(addr);
  return fd < 0 ? -1 : bind_listen(fd, &sa, bound);
}

// A steal listener: every address of both families (one IPv6 socket that also takes IPv4, as v4-mapped addresses), so
// the redirect of an IPv4 or an IPv6 connection reaches it; an IPv4-only netns gets an IPv4 socket.
static int listen_dual(int *bound) {
  int zero = 0, fd = socket(AF_INET6, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
  if (fd < 0) return errno == EAFNOSUPPORT ? listen_on(INADDR_ANY, 0, bound) : -1;
  setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
  struct sockaddr_storage sa = {0};
  *(struct sockaddr_in6 *)&sa = (struct sockaddr_in6){.sin6_family = AF_INET6, .sin6_addr = IN6ADDR_ANY_INIT};
  return bind_listen(fd, &sa, bound);
}

// ---- JSON, as much as the CLI's control messages and OPENs need ----

static const char *skip_ws(const char *p, const char *end) {
  while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
  return p;
}

// p at a '"': just past the closing one, or NULL.
static const char *skip_string(const char *p, const char *end) {
  for (p++; p < end; p++) {
    if (*p == '\\') p++;
    else if (*p == '"') return p + 1;
  }
  return NULL;
}

static const char *skip_value(const char *p, const char *end) {
  if (p >= end) return NULL;
  if (*p == '"') return skip_string(p, end);
  if (*p != '{' && *p != '[') {
    while (p < end && !strchr(",}] \t\r\n", *p)) p++;
    return p;
  }
  for (int depth = 0; p < end;) {
    if (*p == '"') {
      if (!(p = skip_string(p, end))) return NULL;
      continue;
    }
    if (*p == '{' || *p == '[') depth++;
    else if ((*p == '}' || *p == ']') && --depth == 0) return p + 1;
    p++;
  }
  return NULL;
}

// The raw text of the top-level field `name` of a JSON object; 0 when absent or not an object.
static int json_field(const uint8_t *json, size_t len, const char *name, const char **value, size_t *n) {
  const char *p = (const char *)json, *end = p + len;
  p = skip_ws(p, end);
  if (p >= end || *p != '{') return 0;
  for (p = skip_ws(p + 1, end); p < end && *p == '"';) {
    const char *key = p + 1, *after = skip_string(p, end);
    if (!after) return 0;
    p = skip_ws(after, end);
    if (p >= end || *p != ':') return 0;
    const char *v = skip_ws(p + 1, end);
    if (!(p = skip_value(v, end))) return 0;
    if ((size_t)(after - 1 - key) == strlen(name) && !memcmp(key, name, strlen(name))) {
      *value = v, *n = (size_t)(p - v);
      return 1;
    }
    p = skip_ws(p, end);
    if (p < end && *p == ',') p = skip_ws(p + 1, end);
  }
  return 0;
}

// A string field without escapes that fits `room`.
static int json_string(const uint8_t *json, size_t len, const char *name, char *to, size_t room) {
  const char *v;
  size_t n;
  if (!json_field(json, len, name, &v, &n) || n < 2 || v[0] != '"' || n - 2 >= room || memchr(v, '\\', n)) return 0;
  memcpy(to, v + 1, n - 2);
  to[n - 2] = 0;
  return 1;
}

static int json_number(const uint8_t *json, size_t len, const char *name, char *to, size_t room) {
  const char *v;
  size_t n;
  if (!json_field(json, len, name, &v, &n) || n == 0 || n >= room) return 0;
  for (size_t i = 0; i < n; i++)
    if (!strchr("-+.0123456789eE", v[i])) return 0;
  memcpy(to, v, n);
  to[n] = 0;
  return 1;
}

// ---- the tunnel's input ----

static void say(const char *event, const char *token) { printf("%s %s\n", event, token); }

static struct session *find_session(const char *token) {
  struct session *found = NULL;
  for (struct session *s = sessions; s; s = s->next)
    if (same_token(s->token, token)) found = s;
  return found;
}

// The refusal shapes of the agent's own handshake (shared/handshake.ts checkHello), then GOAWAY and close.
static void refuse(struct tunnel *t, const char *code, const char *message, const char *hint) {
  char json[512];
  snprintf(json, sizeof json, "{\"type\":\"error\",\"code\":\"%s\",\"message\":\"%s\",\"hint\":\"%s\"}", code, message,
           hint);
  frame_text(t, CONTROL, 0, json);
  tunnel_close(t, message, 0);
}

static void join(struct tunnel *t, const uint8_t *json, uint32_t len) {
  char token[MAX_NAME + 2];
  struct session *s = json_string(json, len, "token", token, sizeof token) ? find_session(token) : NULL;
  if (!s)
    return refuse(t, "bad_token", "session token does not match this agent",
                  "this agent was started for another devop session; let devop start its own agent");
  if (s->tunnel) tunnel_close(s->tunnel, "replaced by a newer connection of the same session", 0);
  s->tunnel = t, t->session = s;
  frame_text(t, CONTROL, 0, "{\"type\":\"nativeJoined\"}");
  say("joined", s->token);
}

static const char *on_control(struct tunnel *t, const uint8_t *json, uint32_t len) {
  char type[32], id[32], sent[48], pong[128];
  if (!json_string(json, len, "type", type, sizeof type)) return "malformed control message: no type";
  if (!t->session) {
    if (strcmp(type, "nativeJoin") == 0) join(t, json, len);
    else refuse(t, "bad_request", "the first message on a native tunnel must be nativeJoin", "use a matching devop");
  } else if (strcmp(type, "ping") == 0 && json_number(json, len, "id", id, sizeof id) &&
             json_number(json, len, "sentAt", sent, sizeof sent)) {
    snprintf(pong, sizeof pong, "{\"type\":\"pong\",\"id\":%s,\"sentAt\":%s}", id, sent);
    frame_text(t, CONTROL, 0, pong);
  }
  return NULL;
}

// The destination of an OPEN of {"kind":"outgoing","host":"<IPv4 address>","port":1-65535}; 0 for any other.
static int outgoing_ipv4(const uint8_t *json, uint32_t len, struct sockaddr_in *to) {
  char kind[16], host[INET_ADDRSTRLEN], port_text[8], *end;
  if (!json_string(json, len, "kind", kind, sizeof kind) || strcmp(kind, "outgoing") != 0 ||
      !json_string(json, len, "host", host, sizeof host) || inet_pton(AF_INET, host, &to->sin_addr) != 1 ||
      !json_number(json, len, "port", port_text, sizeof port_text))
    return 0;
  long port = strtol(port_text, &end, 10);
  if (*end || port < 1 || port > 65535) return 0;
  to->sin_family = AF_INET, to->sin_port = htons((uint16_t)port);
  return 1;
}

// The CLI's own stream: an outgoing one to an IPv4 address connects from here, any other is the Node agent's to
// serve. Not before nativeJoin: a connection without the session's token makes no connection in the pod.
static const char *on_open(struct tunnel *t, uint32_t id, const uint8_t *json, uint32_t len) {
  if (!t->session) {
    refuse(t, "bad_request", "the first message on a native tunnel must be nativeJoin", "use a matching devop");
    return NULL;
  }
  if (id % 2 == 0) return because("malformed frame: peer opened stream %u with this side's parity", id);
  if (id <= t->last_peer_id) return because("malformed frame: stream id %u reused (last was %u)", id, t->last_peer_id);
  t->last_peer_id = id;
  struct sockaddr_in to = {0};
  if (t->streams >= MAX_STREAMS) frame_text(t, RESET, id, because("too many open streams (limit %d)", MAX_STREAMS));
  else if (!outgoing_ipv4(json, len, &to)) frame_text(t, RESET, id, OUTGOING_ONLY);
  else stream_connect(t, id, &to);
  return NULL;
}

// Returns a protocol error, or NULL. Stream frames for ids this side does not know (any more) are a race: ignored.
static const char *on_frame(struct tunnel *t, int kind, uint32_t id, const uint8_t *p, uint32_t len) {
  if (kind == CONTROL) return on_control(t, p, len);
  if (kind == GOAWAY) {
    tunnel_close(t, NULL, 1);
    return NULL;
  }
  if (kind == OPEN) return on_open(t, id, p, len);
  if (kind == CREDIT && get32(p) == 0) return "malformed frame: CREDIT of 0 bytes";
  struct stream *s = find_stream(t, id);
  if (!s) return NULL;
  if (kind == DATA) return deliver(s, p, len);
  if (kind == CREDIT) {
    s->send_credit += get32(p);
    stream_interest(s);
  } else if (kind == END && !s->ended_there) {
    s->ended_there = 1;
    after_client_write(s);
  } else if (kind == RESET) {
    stream_free(s, 1);
  }
  return NULL;
}

// The checks of codec.ts's checkFrameShape, before the payload is waited for.
static const char *check_shape(int kind, uint32_t id, uint32_t len) {
  int connection_level = kind == CONTROL || kind == GOAWAY;
  if (kind > GOAWAY) return because("malformed frame: unknown frame kind %d", kind);
  if (len > MAX_FRAME) return because("oversized frame: %u bytes exceeds the limit of %d", len, MAX_FRAME);
  if (connection_level && id != 0) return because("malformed frame: kind %d must be on stream 0", kind);
  if (!connection_level && id == 0) return because("malformed frame: kind %d on stream 0", kind);
  if (kind == CREDIT && len != 4) return because("malformed frame: CREDIT payload must be 4 bytes, got %u", len);
  if (kind == END && len != 0) return because("malformed frame: END with a %u-byte payload", len);
  if ((kind == CONTROL || kind == OPEN) && len == 0) return because("malformed frame: empty kind %d", kind);
  if ((kind == RESET || kind == GOAWAY) && len > MAX_REASON)
    return because("malformed frame: %u-byte reason exceeds %d", len, MAX_REASON);
  return NULL;
}

static void protocol_error(struct tunnel *t, const char *why) {
  char reason[256];
  fprintf(stderr, "devop-splice: tunnel of %s: protocol error: %s; closing it\n",
          t->session ? t->session->token : "a connection not joined yet", why);
  snprintf(reason, sizeof reason, "protocol error: %s", why);
  tunnel_close(t, reason, 1);
}

static void read_tunnel(struct tunnel *t) {
  ssize_t n = recv(t->w.fd, t->in + t->in_len, IN_BUFFER - t->in_len, 0);
  if (n < 0 && (errno == EAGAIN || errno == EINTR)) return;
  if (n <= 0) {
    if (n < 0 || t->in_len > 0)
      fprintf(stderr, "devop-splice: tunnel %s\n", n < 0 ? strerror(errno) : "ended inside a frame");
    return tunnel_close(t, NULL, 1);
  }
  t->in_len += (size_t)n;
  size_t at = 0;
  while (t->in_len - at >= HEADER) {
    const uint8_t *h = t->in + at;
    uint32_t len = get32(h), id = get32(h + 5);
    const char *bad = check_shape(h[4], id, len);
    if (!bad && t->in_len - at < HEADER + (size_t)len) break;
    at += HEADER + (size_t)len;
    if (!bad) bad = on_frame(t, h[4], id, h + HEADER, len);
    if (bad) return protocol_error(t, bad);
    if (t->w.dead) return;
  }
  memmove(t->in, t->in + at, t->in_len - at);
  t->in_len -= at;
}

// ---- tunnel connections ----

static void tunnel_new(int fd) {
  struct tunnel *t = calloc(1, sizeof *t);
  if (!t || !(t->in = malloc(IN_BUFFER))) fatal("out of memory");
  t->w = (struct watched){.role = ROLE_TUNNEL, .fd = fd};
  t->next_id = 2, t->budget_left = WINDOW_BUDGET, t->min_rtt = -1;
  t->next = tunnels, tunnels = t;
  nodelay(fd);
  tunnel_interest(t);
}

static void accept_tunnels(void) {
  for (;;) {
    int fd = accept4(tunnel_listener.fd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    if (fd >= 0) tunnel_new(fd);
    else if (errno == EMFILE || errno == ENFILE) {
      if (!refuse_queued(tunnel_listener.fd, "tunnel listener")) return;
    } else if (errno != EINTR && errno != ECONNABORTED) {
      return;
    }
  }
}

// Ends a tunnel connection: its clients' sockets close (the CLI's streams end with the connection), its session has no
// tunnel until one joins again; `announce`: Node learns it with `left TOKEN`.
static void tunnel_close(struct tunnel *t, const char *goaway, int announce) {
  if (t->w.dead) return;
  // Closed, not reset, as the agent's own sockets are when their tunnel goes: an idle keep-alive connection ends
  // cleanly for its client's pool (the kernel still resets one with unread bytes).
  for (int i = 0; i < STREAM_BUCKETS; i++)
    while (t->buckets[i]) stream_free(t->buckets[i], 0);
  if (goaway) {
    frame_text(t, GOAWAY, 0, goaway);
    // One try, without waiting: what the socket does not take now is lost with the connection anyway.
    send(t->w.fd, t->out.data + t->out.head, t->out.len, MSG_NOSIGNAL | MSG_DONTWAIT);
  }
  struct session *s = t->session;
  if (s && s->tunnel == t) {
    s->tunnel = NULL;
    if (announce) say("left", s->token);
  }
  for (struct tunnel **p = &tunnels; *p; p = &(*p)->next)
    if (*p == t) {
      *p = t->next;
      break;
    }
  close(t->w.fd);
  bury(&t->w);
}

static void on_tunnel(struct tunnel *t, uint32_t events) {
  if (events & EPOLLOUT) flush(t);
  if (!t->w.dead && (events & (EPOLLIN | EPOLLHUP | EPOLLERR))) read_tunnel(t);
}

// ---- requests on stdin ----

static struct steal *find_steal(const char *key) {
  struct steal *st = steals;
  while (st && strcmp(st->key, key) != 0) st = st->next;
  return st;
}

static void request_session(char *token) {
  if (!valid_name(token, TOKEN_CHARS)) return (void)printf("error a token is 1-%d of [A-Za-z0-9_-]\n", MAX_NAME);
  if (!find_session(token)) {
    struct session *s = calloc(1, sizeof *s);
    if (!s) fatal("out of memory");
    strcpy(s->token, token);
    s->next = sessions, sessions = s;
  }
  printf("ok\n");
}

static void request_end(char *token) {
  struct session *s = valid_name(token, TOKEN_CHARS) ? find_session(token) : NULL;
  if (!s) return (void)printf("error no session %s\n", token);
  for (struct steal *st = steals, *next; st; st = next) {
    next = st->next;
    if (st->session == s) steal_close(st);
  }
  if (s->tunnel) tunnel_close(s->tunnel, "the session ended", 0);
  for (struct session **p = &sessions; *p; p = &(*p)->next)
    if (*p == s) {
      *p = s->next;
      break;
    }
  free(s);
  printf("ok\n");
}

// Goes into the OPEN's JSON as it is: no control characters, quotes or backslashes (UTF-8 is fine).
static int valid_subid(const char *s) {
  size_t n = strlen(s);
  if (n < 1 || n > MAX_SUBID) return 0;
  for (const unsigned char *c = (const unsigned char *)s; *c; c++)
    if (*c <= ' ' || *c == 0x7f || *c == '"' || *c == '\\') return 0;
  return 1;
}

static void request_steal(char *key, char *token, char *port_text, char *subid) {
  char *end;
  long port = strtol(port_text, &end, 10);
  struct session *s = valid_name(token, TOKEN_CHARS) ? find_session(token) : NULL;
  if (!valid_name(key, KEY_CHARS)) return (void)printf("error a steal key is 1-%d of [A-Za-z0-9_.-]\n", MAX_NAME);
  if (find_steal(key)) return (void)printf("error steal %s exists already\n", key);
  if (!s) return (void)printf("error no session %s\n", token);
  if (*end || port < 1 || port > 65535) return (void)printf("error the stolen port must be 1-65535: %s\n", port_text);
  if (!valid_subid(subid))
    return (void)printf("error a subscription id is 1-%d characters, no spaces, controls, quotes or backslashes\n",
                        MAX_SUBID);
  struct steal *st = calloc(1, sizeof *st);
  if (!st) fatal("out of memory");
  int bound;
  st->w = (struct watched){.role = ROLE_STEAL, .fd = listen_dual(&bound)};
  if (st->w.fd < 0) {
    free(st);
    return (void)printf("error listen: %s\n", strerror(errno));
  }
  strcpy(st->key, key);
  st->session = s, st->port = (int)port, st->id = ++steal_ids;
  if (strcmp(subid, "-") != 0) strcpy(st->subid, subid);
  st->next = steals, steals = st;
  watch(&st->w, EPOLLIN);
  printf("ok %d\n", bound);
}

static void request_unsteal(char *key) {
  struct steal *st = find_steal(key);
  if (!st) return (void)printf("error no steal %s\n", key);
  accept_clients(st);
  steal_close(st);
  printf("ok\n");
}

// The steal ended: its listener closes (what is queued there is refused by the kernel) and so do the connections it
// took, each with a RESET to the CLI and a FIN to its client, as the agent's own listener and connections close.
static void request_drop(char *key) {
  struct steal *st = find_steal(key);
  if (!st) return (void)printf("error no steal %s\n", key);
  unsigned long long id = st->id;
  steal_close(st);
  for (struct tunnel *t = tunnels; t; t = t->next)
    for (int i = 0; i < STREAM_BUCKETS; i++)
      for (struct stream *s = t->buckets[i], *next; s; s = next) {
        next = s->bucket_next;
        if (s->steal_id != id) continue;
        frame_text(t, RESET, s->id, "the steal ended");
        stream_free(s, 0);
      }
  printf("ok\n");
}

static void request(char *line) {
  char *words[6] = {0}, *save = NULL;
  int count = 0;
  for (char *w = strtok_r(line, " ", &save); w && count < 6; w = strtok_r(NULL, " ", &save)) words[count++] = w;
  const char *cmd = count ? words[0] : "";
  if (!strcmp(cmd, "session") && count == 2) request_session(words[1]);
  else if (!strcmp(cmd, "end") && count == 2) request_end(words[1]);
  else if (!strcmp(cmd, "steal") && count == 5) request_steal(words[1], words[2], words[3], words[4]);
  else if (!strcmp(cmd, "unsteal") && count == 2) request_unsteal(words[1]);
  else if (!strcmp(cmd, "drop") && count == 2) request_drop(words[1]);
  else
    printf("error unknown request (session TOKEN | end TOKEN | steal KEY TOKEN PORT SUBID | unsteal KEY | drop KEY)\n");
}

// Lines of at most MAX_REQUEST bytes; a longer one gets its one error answer when its end comes.
static void read_requests(void) {
  static char line[MAX_REQUEST + 1];
  static size_t len;
  static int too_long;
  char chunk[4096];
  ssize_t n = read(STDIN_FILENO, chunk, sizeof chunk);
  if (n < 0 && errno == EINTR) return;
  if (n == 0) exit(0);  // the agent closed its end (or ended): nothing more to serve
  if (n < 0) fatal("stdin");
  for (ssize_t i = 0; i < n; i++) {
    if (chunk[i] != '\n') {
      if (len < MAX_REQUEST) line[len++] = chunk[i];
      else too_long = 1;
      continue;
    }
    line[len] = 0;
    if (too_long) printf("error request longer than %d bytes\n", MAX_REQUEST);
    else request(line);
    len = 0, too_long = 0;
  }
}

// ---- the loop ----

static void dispatch(struct watched *w, uint32_t events) {
  switch (w->role) {
  case ROLE_STDIN: return read_requests();
  case ROLE_TUNNEL_LISTENER: return accept_tunnels();
  case ROLE_TUNNEL: return on_tunnel((struct tunnel *)w, events);
  case ROLE_STEAL: return accept_clients((struct steal *)w);
  case ROLE_CLIENT: return on_client((struct stream *)w, events);
  case ROLE_PASS: return on_pass((struct pass_end *)w, events);
  }
}

int main(int argc, char **argv) {
  // Ends with the agent however the agent ends (its end of stdin may be closed already: then the first read sees EOF).
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) fatal("prctl");
  char *end;
  long port = argc == 2 ? strtol(argv[1], &end, 10) : -1;
  if (argc != 2 || *end || port < 0 || port > 65535) {
    fprintf(stderr, "devop-splice: usage: devop-splice TUNNEL_PORT (0: any free port)\n");
    return 2;
  }
  const char *timeout = getenv("DEVOP_SPLICE_CONNECT_TIMEOUT_MS");
  int timeout_ms = timeout ? atoi(timeout) : 0;
  if (timeout_ms > 0) connect_timeout_ms = timeout_ms;
  signal(SIGPIPE, SIG_IGN);  // a client or tunnel that went away is an error from send(), not the end of the process
  setvbuf(stdout, NULL, _IOLBF, 0);
  if ((ep = epoll_create1(EPOLL_CLOEXEC)) < 0) fatal("epoll_create1");
  if ((spare_fd = spare()) < 0) fatal("eventfd");
  int bound;
  if ((tunnel_listener.fd = listen_on(INADDR_LOOPBACK, (int)port, &bound)) < 0) fatal("tunnel listener");
  watch(&tunnel_listener, EPOLLIN);
  struct epoll_event ev = {.events = EPOLLIN, .data.ptr = &stdin_watch};
  if (epoll_ctl(ep, EPOLL_CTL_ADD, STDIN_FILENO, &ev) < 0) fatal("stdin (a pipe from the agent)");
  stdin_watch.registered = 1, stdin_watch.events = EPOLLIN;
  printf("ready %d\n", bound);
  for (;;) {
    struct epoll_event events[256];
    int n = epoll_wait(ep, events, 256, wait_ms());
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) fatal("epoll_wait");
    for (int i = 0; i < n; i++) {
      struct watched *w = events[i].data.ptr;
      if (!w->dead) dispatch(w, events[i].events);
    }
    expire_connects();
    flush_tunnels();
    free_graveyard();
  }
}
