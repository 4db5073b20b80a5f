// dist/devop-netns: runs the local command of `devop exec --outgoing-netns` in a network namespace of its own, where
// every TCP connect and every UDP datagram to port 53 reaches a forwarder that hands it to devop over a Unix socket.
//
//   devop-netns [--publish PORT]... [--] COMMAND [ARGS...]
//   env: DEVOP_NETNS_SOCKET  devop's Unix socket (filesystem sockets cross network namespaces)
//        DEVOP_NETNS_TOKEN   the session's secret, the first word of every request (taken out of the command's env)
//
// Not root: a user namespace too (the command keeps seeing its own uid and gid), which needs unprivileged user
// namespaces. Root: a network namespace only. In it: lo up, a default route over lo (IPv4 and IPv6), and nftables rules
// (through libnftables, loaded at run time) that redirect TCP to the forwarder's listener and UDP port 53 to its DNS
// socket. The forwarder is a process of the command's group that reads each connection's original destination
// (SO_ORIGINAL_DST) and asks devop, one Unix connection per TCP connection, one line per request:
//   TOKEN connect HOST PORT   →  "OK" then the bytes both ways, or "ERR CODE MESSAGE"
//   TOKEN lookup NAME         →  "OK ADDRESS..." (may be none), or "ERR CODE MESSAGE"
// --publish PORT (the ports devop steals or mirrors to): a helper in this machine's namespace listens on
// 127.0.0.1:PORT once the command listens on PORT inside, and passes each connection in.
// A connect to a loopback address is first tried inside the namespace (the command's own servers), and otherwise
// devop dials it on this machine. The forwarder's own connects carry a mark the rules let through.
// So that a destination the pod cannot reach fails the program's connect() itself (ECONNREFUSED, not a connection that
// is accepted and then reset), the command's connect() calls are held by a seccomp user notification: the forwarder
// has devop dial first, then fails the call with the dial's errno or lets it go on to the redirect, where the dialled
// connection waits for it (by the socket's local port). Where seccomp notifications are unavailable, a failed dial is
// a reset.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/ipv6.h>
#include <linux/seccomp.h>
#include <linux/netfilter_ipv4.h>
#include <net/if.h>
#include <net/route.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <signal.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stddef.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/syscall.h>
#include <sys/uio.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/types.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/** The mark of the forwarder's own connects inside the namespace: the rules let them through unredirected. */
#define OWN_MARK 0x64657670
/** Replies to a DNS query say names live this long (s): the cluster's answers change, the program asks again. */
#define DNS_TTL 5
/** The architecture whose connect() the seccomp filter holds (the launcher's own; others' calls go on as they are). */
#if defined(__x86_64__)
#define AUDIT_ARCH_NATIVE AUDIT_ARCH_X86_64
#elif defined(__aarch64__)
#define AUDIT_ARCH_NATIVE AUDIT_ARCH_AARCH64
#else
#error "devop-netns: add this architecture's AUDIT_ARCH_ value"
#endif
/** The program's own address in the namespace (getsockname of its connections), one of each family. */
#define PROGRAM_ADDRESS4 "169.254.64.1"
#define PROGRAM_ADDRESS6 "fd64:6576:6f70::1"
#define LINE_MAX_LEN 4096
/** linux/netfilter_ipv6/ip6_tables.h, whose headers clash with net/if.h's. */
#ifndef IP6T_SO_ORIGINAL_DST
#define IP6T_SO_ORIGINAL_DST 80
#endif

static const char *devop_socket;
static char token[257];
static int tcp_port4, tcp_port6;

static void die(const char *fmt, ...) {
  va_list args;
  va_start(args, fmt);
  fputs("devop-netns: ", stderr);
  vfprintf(stderr, fmt, args);
  fputc('\n', stderr);
  va_end(args);
  exit(125);
}

static int write_file(const char *path, const char *text) {
  int fd = open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return -1;
  ssize_t n = write(fd, text, strlen(text));
  close(fd);
  return n == (ssize_t)strlen(text) ? 0 : -1;
}

/** A user namespace (when not root) and a network namespace, the uid and gid mapped to themselves. */
static void enter_namespaces(void) {
  uid_t uid = getuid();
  gid_t gid = getgid();
  if (uid == 0) {
    if (unshare(CLONE_NEWNET) != 0) die("cannot create a network namespace: %s", strerror(errno));
    return;
  }
  if (unshare(CLONE_NEWUSER | CLONE_NEWNET) != 0)
    die("cannot create a user namespace (%s): unprivileged user namespaces are off on this machine "
        "(sysctl user.max_user_namespaces, kernel.unprivileged_userns_clone, or AppArmor's "
        "kernel.apparmor_restrict_unprivileged_userns) — allow them, or run without --outgoing-netns",
        strerror(errno));
  char map[64];
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)uid, (unsigned)uid);
  if (write_file("/proc/self/uid_map", map) != 0) die("cannot write uid_map: %s", strerror(errno));
  if (write_file("/proc/self/setgroups", "deny\n") != 0 && errno != ENOENT)
    die("cannot write setgroups: %s", strerror(errno));
  snprintf(map, sizeof map, "%u %u 1\n", (unsigned)gid, (unsigned)gid);
  if (write_file("/proc/self/gid_map", map) != 0) die("cannot write gid_map: %s", strerror(errno));
}

/** lo up, and a default route over it for both families, so that a connect anywhere leaves and meets the rules. */
static void set_up_loopback(void) {
  int fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  struct ifreq ifr = {0};
  strcpy(ifr.ifr_name, "lo");
  if (ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) die("cannot read lo's flags: %s", strerror(errno));
  ifr.ifr_flags |= IFF_UP | IFF_RUNNING;
  if (ioctl(fd, SIOCSIFFLAGS, &ifr) != 0) die("cannot bring lo up: %s", strerror(errno));
  // An address for the program's side of a connection: with loopback's alone, a datagram to another address leaves
  // from 0.0.0.0, and the DNS answer to it would not come back from the address the program asked.
  struct ifreq alias = {0};
  strcpy(alias.ifr_name, "lo:devop");
  struct sockaddr_in *own = (struct sockaddr_in *)&alias.ifr_addr;
  own->sin_family = AF_INET;
  inet_pton(AF_INET, PROGRAM_ADDRESS4, &own->sin_addr);
  if (ioctl(fd, SIOCSIFADDR, &alias) != 0) die("cannot add %s to lo: %s", PROGRAM_ADDRESS4, strerror(errno));
  inet_pton(AF_INET, "255.255.255.255", &own->sin_addr);
  ioctl(fd, SIOCSIFNETMASK, &alias);
  struct rtentry route = {0};
  struct sockaddr_in *any = (struct sockaddr_in *)&route.rt_dst;
  any->sin_family = AF_INET;
  ((struct sockaddr_in *)&route.rt_genmask)->sin_family = AF_INET;
  route.rt_flags = RTF_UP;
  route.rt_dev = "lo";
  if (ioctl(fd, SIOCADDRT, &route) != 0) die("cannot add the IPv4 default route: %s", strerror(errno));
  close(fd);
  // IPv6 may be off on this machine (no ::1): then IPv4 alone.
  int fd6 = socket(AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd6 < 0) return;
  struct in6_rtmsg route6 = {0};
  route6.rtmsg_flags = RTF_UP;
  route6.rtmsg_metric = 1;
  route6.rtmsg_ifindex = (int)if_nametoindex("lo");
  // Not fatal: IPv6 destinations then fail with ENETUNREACH, as on a machine without IPv6.
  if (ioctl(fd6, SIOCADDRT, &route6) == 0) {
    struct in6_ifreq own6 = {.ifr6_prefixlen = 128, .ifr6_ifindex = route6.rtmsg_ifindex};
    inet_pton(AF_INET6, PROGRAM_ADDRESS6, &own6.ifr6_addr);
    ioctl(fd6, SIOCSIFADDR, &own6);
  }
  close(fd6);
}

/** A listening (TCP) or bound (UDP) socket on the loopback address of family, on a free port; -1 without IPv6. */
static int loopback_socket(int family, int type, int *port) {
  int fd = socket(family, type | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int one = 1;
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  struct sockaddr_storage address = {0};
  socklen_t length;
  if (family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&address;
    in->sin_family = AF_INET;
    in->sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    length = sizeof *in;
  } else {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&address;
    in6->sin6_family = AF_INET6;
    in6->sin6_addr = in6addr_loopback;
    setsockopt(fd, IPPROTO_IPV6, IPV6_V6ONLY, &one, sizeof one);
    length = sizeof *in6;
  }
  if (bind(fd, (struct sockaddr *)&address, length) != 0 || (type == SOCK_STREAM && listen(fd, 128) != 0)) {
    close(fd);
    return -1;
  }
  getsockname(fd, (struct sockaddr *)&address, &length);
  *port = ntohs(family == AF_INET ? ((struct sockaddr_in *)&address)->sin_port
                                  : ((struct sockaddr_in6 *)&address)->sin6_port);
  return fd;
}

/** The redirect rules, through libnftables (the library of the nft command), so no helper program is run. */
static void install_rules(int tcp4, int tcp6, int dns4, int dns6) {
  void *library = dlopen("libnftables.so.1", RTLD_NOW);
  if (!library)
    die("cannot load libnftables.so.1 (%s): install nftables (apt install nftables, dnf install nftables), or run "
        "without --outgoing-netns", dlerror());
  void *(*ctx_new)(uint32_t) = (void *(*)(uint32_t))dlsym(library, "nft_ctx_new");
  int (*run)(void *, const char *) = (int (*)(void *, const char *))dlsym(library, "nft_run_cmd_from_buffer");
  int (*buffer_error)(void *) = (int (*)(void *))dlsym(library, "nft_ctx_buffer_error");
  const char *(*get_error)(void *) = (const char *(*)(void *))dlsym(library, "nft_ctx_get_error_buffer");
  if (!ctx_new || !run) die("libnftables.so.1 lacks nft_ctx_new / nft_run_cmd_from_buffer: update nftables");
  void *ctx = ctx_new(0);
  if (buffer_error) buffer_error(ctx);
  char rules[1024];
  int n = snprintf(rules, sizeof rules,
                   "table inet devop {\n"
                   "  chain output {\n"
                   "    type nat hook output priority -100; policy accept;\n"
                   "    meta mark 0x%x return\n"
                   "    meta nfproto ipv4 meta l4proto tcp redirect to :%d\n"
                   "    meta nfproto ipv4 udp dport 53 redirect to :%d\n",
                   OWN_MARK, tcp4, dns4);
  if (tcp6 > 0 && dns6 > 0)
    n += snprintf(rules + n, sizeof rules - (size_t)n,
                  "    meta nfproto ipv6 meta l4proto tcp redirect to :%d\n"
                  "    meta nfproto ipv6 udp dport 53 redirect to :%d\n",
                  tcp6, dns6);
  snprintf(rules + n, sizeof rules - (size_t)n, "  }\n}\n");
  if (run(ctx, rules) != 0) {
    const char *why = get_error ? get_error(ctx) : "";
    die("cannot install the nftables rules of the namespace (the kernel needs nf_tables with nat and redirect): %s",
        why && *why ? why : "no detail");
  }
}

/** Connects to devop's Unix socket and sends one request line; returns the socket, or -1. */
static int ask_devop(const char *request) {
  int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
  struct sockaddr_un address = {.sun_family = AF_UNIX};
  strncpy(address.sun_path, devop_socket, sizeof address.sun_path - 1);
  if (fd < 0 || connect(fd, (struct sockaddr *)&address, sizeof address) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  char line[LINE_MAX_LEN];
  int n = snprintf(line, sizeof line, "%s %s\n", token, request);
  if (n >= (int)sizeof line || write(fd, line, (size_t)n) != n) {
    close(fd);
    return -1;
  }
  return fd;
}

/** Reads devop's answer line byte by byte (what follows it belongs to the connection). */
static int read_line(int fd, char *line, size_t size) {
  size_t length = 0;
  while (length + 1 < size) {
    char c;
    ssize_t n = read(fd, &c, 1);
    if (n <= 0) return -1;
    if (c == '\n') break;
    line[length++] = c;
  }
  line[length] = 0;
  return (int)length;
}

/** Copies bytes both ways until both sides have ended, passing a half close on. */
static void splice_both(int a, int b) {
  char buffer[65536];
  int open_a = 1, open_b = 1;
  while (open_a || open_b) {
    struct pollfd fds[2] = {{.fd = open_a ? a : -1, .events = POLLIN}, {.fd = open_b ? b : -1, .events = POLLIN}};
    if (poll(fds, 2, -1) < 0) {
      if (errno == EINTR) continue;
      break;
    }
    for (int i = 0; i < 2; i++) {
      if (!fds[i].revents) continue;
      int from = i == 0 ? a : b, to = i == 0 ? b : a;
      ssize_t n = read(from, buffer, sizeof buffer);
      if (n <= 0) {
        if (n < 0 && errno == ECONNRESET) {
          // A reset on one side is a reset on the other.
          struct linger hard = {1, 0};
          setsockopt(to, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
          return;
        }
        shutdown(to, SHUT_WR);
        if (i == 0) open_a = 0;
        else open_b = 0;
        continue;
      }
      for (ssize_t done = 0; done < n;) {
        ssize_t w = write(to, buffer + done, (size_t)(n - done));
        if (w <= 0) return;
        done += w;
      }
    }
  }
}

/** Resets the program's connection: what it sees of a destination devop could not reach. */
static void reset(int fd) {
  struct linger hard = {1, 0};
  setsockopt(fd, SOL_SOCKET, SO_LINGER, &hard, sizeof hard);
  close(fd);
}

/**
 * A connect to a loopback address that something in the namespace listens on (the command's own server) stays there:
 * the forwarder connects to it itself, with the mark the rules let through. -1 when nothing listens.
 */
static int connect_inside(const struct sockaddr_storage *destination) {
  int fd = socket(destination->ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
  int mark = OWN_MARK;
  if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_MARK, &mark, sizeof mark) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  socklen_t length = destination->ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  if (connect(fd, (const struct sockaddr *)destination, length) != 0) {
    close(fd);
    return -1;
  }
  return fd;
}

static int is_loopback(const struct sockaddr_storage *address) {
  if (address->ss_family == AF_INET)
    return (ntohl(((const struct sockaddr_in *)address)->sin_addr.s_addr) >> 24) == 127;
  return IN6_IS_ADDR_LOOPBACK(&((const struct sockaddr_in6 *)address)->sin6_addr);
}

/** The connection devop dialled for the program's socket of local port `port` while its connect() was held, or -1. */
static int pending_take(int port);

/** A DNS message: answers a query (question in `query`, `length` bytes) into `reply`; returns the reply's length. */
static int answer_dns(const unsigned char *query, int length, unsigned char *reply, int size);

static void serve_dns_over_tcp(int client) {
  unsigned char query[65537], reply[65537];
  for (;;) {
    unsigned char prefix[2];
    if (recv(client, prefix, 2, MSG_WAITALL) != 2) break;
    int length = prefix[0] << 8 | prefix[1];
    if (length == 0 || recv(client, query, (size_t)length, MSG_WAITALL) != length) break;
    int n = answer_dns(query, length, reply + 2, (int)sizeof reply - 2);
    if (n <= 0) break;
    reply[0] = (unsigned char)(n >> 8);
    reply[1] = (unsigned char)n;
    if (write(client, reply, (size_t)n + 2) != n + 2) break;
  }
  close(client);
}

static void *serve_connection(void *argument) {
  int client = (int)(intptr_t)argument;
  struct sockaddr_storage destination = {0};
  socklen_t length = sizeof destination;
  struct sockaddr_storage local = {0};
  socklen_t local_length = sizeof local;
  getsockname(client, (struct sockaddr *)&local, &local_length);
  int got = local.ss_family == AF_INET6
                ? getsockopt(client, SOL_IPV6, IP6T_SO_ORIGINAL_DST, &destination, &length)
                : getsockopt(client, SOL_IP, SO_ORIGINAL_DST, &destination, &length);
  if (got != 0) {
    reset(client);
    return NULL;
  }
  char host[INET6_ADDRSTRLEN];
  int port;
  if (destination.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&destination)->sin_addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in *)&destination)->sin_port);
  } else {
    inet_ntop(AF_INET6, &((struct sockaddr_in6 *)&destination)->sin6_addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in6 *)&destination)->sin6_port);
  }
  if (port == 53) {
    serve_dns_over_tcp(client);
    return NULL;
  }
  struct sockaddr_storage peer = {0};
  socklen_t peer_length = sizeof peer;
  getpeername(client, (struct sockaddr *)&peer, &peer_length);
  int peer_port = ntohs(peer.ss_family == AF_INET ? ((struct sockaddr_in *)&peer)->sin_port
                                                  : ((struct sockaddr_in6 *)&peer)->sin6_port);
  // Dialled already while the program's connect() was held.
  int remote = is_loopback(&destination) ? -1 : pending_take(peer_port);
  if (remote < 0 && is_loopback(&destination) && port != tcp_port4 && port != tcp_port6)
    remote = connect_inside(&destination);
  if (remote < 0) {
    char request[256];
    snprintf(request, sizeof request, "connect %s %d", host, port);
    remote = ask_devop(request);
    char line[LINE_MAX_LEN];
    if (remote < 0 || read_line(remote, line, sizeof line) < 0 || strncmp(line, "OK", 2) != 0) {
      if (remote >= 0) close(remote);
      reset(client);
      return NULL;
    }
  }
  splice_both(client, remote);
  close(remote);
  close(client);
  return NULL;
}

/** Reads a question's name (no compression in a question) as dotted text; returns the offset after it, or -1. */
static int read_name(const unsigned char *message, int length, int offset, char *name, size_t size) {
  size_t out = 0;
  while (offset < length) {
    int label = message[offset++];
    if (label == 0) {
      name[out] = 0;
      return offset;
    }
    if (label > 63 || offset + label > length || out + (size_t)label + 2 > size) return -1;
    if (out) name[out++] = '.';
    for (int i = 0; i < label; i++) {
      char c = (char)message[offset + i];
      // Names go to devop as one word of a line: a space, a newline or a control character is no host name.
      if (c <= ' ' || c == 0x7f) return -1;
      name[out++] = c;
    }
    offset += label;
  }
  return -1;
}

enum { RCODE_NOERROR = 0, RCODE_SERVFAIL = 2, RCODE_NXDOMAIN = 3, RCODE_NOTIMP = 4 };

static int answer_dns(const unsigned char *query, int length, unsigned char *reply, int size) {
  if (length < 12 || size < 512) return -1;
  int opcode = (query[2] >> 3) & 0x0f;
  int questions = query[4] << 8 | query[5];
  char name[256];
  int end = questions == 1 && opcode == 0 ? read_name(query, length, 12, name, sizeof name) : -1;
  int type = 0;
  if (end > 0 && end + 4 <= length) type = query[end] << 8 | query[end + 1];
  else end = -1;
  int question_end = end > 0 ? end + 4 : 12;
  // The reply: the query's id and question, QR, the query's RD, RA.
  memcpy(reply, query, (size_t)question_end);
  reply[2] = (unsigned char)(0x80 | (query[2] & 0x79));
  reply[3] = 0x80;
  memset(reply + 6, 0, 6);
  if (end < 0) {
    reply[3] |= RCODE_NOTIMP;
    reply[4] = reply[5] = 0;
    return 12;
  }
  if (type != 1 && type != 28) {
    reply[3] |= RCODE_NOTIMP;
    return question_end;
  }
  char request[300];
  snprintf(request, sizeof request, "lookup %s", name);
  int fd = ask_devop(request);
  char line[LINE_MAX_LEN];
  if (fd < 0 || read_line(fd, line, sizeof line) < 0) {
    if (fd >= 0) close(fd);
    reply[3] |= RCODE_SERVFAIL;
    return question_end;
  }
  close(fd);
  if (strncmp(line, "OK", 2) != 0) {
    reply[3] |= strncmp(line, "ERR ENOTFOUND", 13) == 0 ? RCODE_NXDOMAIN : RCODE_SERVFAIL;
    return question_end;
  }
  int out = question_end, answers = 0;
  char *save = NULL;
  for (char *word = strtok_r(line + 2, " ", &save); word; word = strtok_r(NULL, " ", &save)) {
    unsigned char address[16];
    int family = strchr(word, ':') ? AF_INET6 : AF_INET;
    int bytes = family == AF_INET ? 4 : 16;
    if ((type == 1) != (family == AF_INET) || inet_pton(family, word, address) != 1) continue;
    if (out + 12 + bytes > size) break;
    unsigned char *rr = reply + out;
    rr[0] = 0xc0, rr[1] = 12;  // the name: a pointer to the question's
    rr[2] = 0, rr[3] = (unsigned char)type, rr[4] = 0, rr[5] = 1;
    rr[6] = 0, rr[7] = 0, rr[8] = 0, rr[9] = DNS_TTL;
    rr[10] = 0, rr[11] = (unsigned char)bytes;
    memcpy(rr + 12, address, (size_t)bytes);
    out += 12 + bytes;
    answers++;
  }
  reply[6] = (unsigned char)(answers >> 8);
  reply[7] = (unsigned char)answers;
  return out;
}

struct datagram {
  int fd;
  struct sockaddr_storage from;
  socklen_t from_length;
  int length;
  unsigned char data[4096];
};

static void *serve_datagram(void *argument) {
  struct datagram *query = argument;
  unsigned char reply[4096];
  int n = answer_dns(query->data, query->length, reply, 512);
  if (n > 0) sendto(query->fd, reply, (size_t)n, 0, (struct sockaddr *)&query->from, query->from_length);
  free(query);
  return NULL;
}

static void start_thread(void *(*run)(void *), void *argument) {
  pthread_t thread;
  pthread_attr_t attributes;
  pthread_attr_init(&attributes);
  pthread_attr_setdetachstate(&attributes, PTHREAD_CREATE_DETACHED);
  pthread_attr_setstacksize(&attributes, 256 * 1024);
  if (pthread_create(&thread, &attributes, run, argument) != 0) {
    // Out of threads: this one connection or query is dropped, the next may find one.
    if (run == serve_connection) reset((int)(intptr_t)argument);
    else free(argument);
  }
  pthread_attr_destroy(&attributes);
}

/** Connections devop dialled while the program's connect() was held, by the program's local port, until accepted. */
#define MAX_PENDING 256
#define PENDING_TTL_S 20
static struct {
  int port, remote;
  time_t since;
} pending[MAX_PENDING];
static pthread_mutex_t pending_lock = PTHREAD_MUTEX_INITIALIZER;

static void pending_put(int port, int remote) {
  pthread_mutex_lock(&pending_lock);
  time_t now = time(NULL);
  int slot = -1;
  for (int i = 0; i < MAX_PENDING; i++) {
    // A connect whose redirect never arrived (the program closed the socket first) frees its slot in time.
    if (pending[i].remote > 0 && now - pending[i].since > PENDING_TTL_S) {
      close(pending[i].remote);
      pending[i].remote = 0;
    }
    if (pending[i].remote <= 0 && slot < 0) slot = i;
  }
  if (slot >= 0) pending[slot] = (typeof(pending[0])){port, remote, now};
  else close(remote);
  pthread_mutex_unlock(&pending_lock);
}

static int pending_take(int port) {
  int remote = -1;
  pthread_mutex_lock(&pending_lock);
  for (int i = 0; i < MAX_PENDING; i++) {
    if (pending[i].remote > 0 && pending[i].port == port) {
      remote = pending[i].remote;
      pending[i].remote = 0;
      break;
    }
  }
  pthread_mutex_unlock(&pending_lock);
  return remote;
}

/** The errno a failed dial's code stands for (the program's connect() fails with it). */
static int errno_of(const char *line) {
  static const struct {
    const char *code;
    int value;
  } codes[] = {{"ECONNREFUSED", ECONNREFUSED}, {"ENETUNREACH", ENETUNREACH}, {"EHOSTUNREACH", EHOSTUNREACH},
               {"ETIMEDOUT", ETIMEDOUT},       {"ENOTFOUND", EHOSTUNREACH}, {"EACCES", EACCES}};
  for (size_t i = 0; i < sizeof codes / sizeof codes[0]; i++)
    if (strncmp(line + 4, codes[i].code, strlen(codes[i].code)) == 0) return codes[i].value;
  return ECONNREFUSED;
}

struct held_connect {
  int notify;
  struct seccomp_notif request;
};

static void answer_connect(int notify, uint64_t id, int error) {
  struct seccomp_notif_resp response = {.id = id};
  if (error) response.error = -error;
  else response.flags = SECCOMP_USER_NOTIF_FLAG_CONTINUE;
  ioctl(notify, SECCOMP_IOCTL_NOTIF_SEND, &response);
}

/** One held connect(): dial through devop first when it is a TCP connect to a non-loopback address. */
static void *serve_held_connect(void *argument) {
  struct held_connect *held = argument;
  struct seccomp_notif *request = &held->request;
  int error = 0;
  struct sockaddr_storage destination = {0};
  size_t length = request->data.args[2] < sizeof destination ? request->data.args[2] : sizeof destination;
  struct iovec local = {&destination, length}, remote = {(void *)request->data.args[1], length};
  int pidfd = (int)syscall(SYS_pidfd_open, request->pid, 0);
  int socket_fd = pidfd < 0 ? -1 : (int)syscall(SYS_pidfd_getfd, pidfd, (int)request->data.args[0], 0);
  int type = 0;
  socklen_t type_length = sizeof type;
  if (socket_fd < 0 || process_vm_readv((pid_t)request->pid, &local, 1, &remote, 1, 0) != (ssize_t)length ||
      ioctl(held->notify, SECCOMP_IOCTL_NOTIF_ID_VALID, &request->id) != 0 ||
      getsockopt(socket_fd, SOL_SOCKET, SO_TYPE, &type, &type_length) != 0 || type != SOCK_STREAM ||
      (destination.ss_family != AF_INET && destination.ss_family != AF_INET6) || is_loopback(&destination)) {
    goto go_on;  // not ours to hold (UDP, Unix, loopback…), or nothing to read: the call goes on as it is
  }
  char host[INET6_ADDRSTRLEN];
  int port;
  if (destination.ss_family == AF_INET) {
    inet_ntop(AF_INET, &((struct sockaddr_in *)&destination)->sin_addr, host, sizeof host);
    port = ntohs(((struct sockaddr_in *)&destination)->sin_port);
  } else {
    const struct in6_addr *address = &((struct sockaddr_in6 *)&destination)->sin6_addr;
    if (IN6_IS_ADDR_V4MAPPED(address)) inet_ntop(AF_INET, &address->s6_addr[12], host, sizeof host);
    else inet_ntop(AF_INET6, address, host, sizeof host);
    port = ntohs(((struct sockaddr_in6 *)&destination)->sin6_port);
  }
  if (port == 53) goto go_on;  // DNS over TCP is answered in the namespace
  // The socket's local port names the redirected connection when it arrives: bind it now if the program did not.
  struct sockaddr_storage bound = {0};
  socklen_t bound_length = sizeof bound;
  getsockname(socket_fd, (struct sockaddr *)&bound, &bound_length);
  int local_port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                                     : ((struct sockaddr_in6 *)&bound)->sin6_port);
  if (local_port == 0) {
    struct sockaddr_storage any = {.ss_family = bound.ss_family};
    if (bind(socket_fd, (struct sockaddr *)&any, bound_length) != 0) goto go_on;
    bound_length = sizeof bound;
    getsockname(socket_fd, (struct sockaddr *)&bound, &bound_length);
    local_port = ntohs(bound.ss_family == AF_INET ? ((struct sockaddr_in *)&bound)->sin_port
                                                   : ((struct sockaddr_in6 *)&bound)->sin6_port);
  }
  char line[LINE_MAX_LEN];
  snprintf(line, sizeof line, "connect %s %d", host, port);
  int dialled = ask_devop(line);
  if (dialled < 0 || read_line(dialled, line, sizeof line) < 0) {
    if (dialled >= 0) close(dialled);
    error = ECONNREFUSED;
  } else if (strncmp(line, "OK", 2) != 0) {
    close(dialled);
    error = errno_of(line);
  } else {
    pending_put(local_port, dialled);
  }
go_on:
  answer_connect(held->notify, request->id, error);
  if (socket_fd >= 0) close(socket_fd);
  if (pidfd >= 0) close(pidfd);
  free(held);
  return NULL;
}

static void *receive_connects(void *argument) {
  int notify = (int)(intptr_t)argument;
  for (;;) {
    struct held_connect *held = calloc(1, sizeof *held);
    if (!held) return NULL;
    held->notify = notify;
    if (ioctl(notify, SECCOMP_IOCTL_NOTIF_RECV, &held->request) != 0) {
      free(held);
      if (errno == EINTR || errno == ENOENT) continue;
      return NULL;  // no process left under the filter
    }
    pthread_t thread;
    if (pthread_create(&thread, NULL, serve_held_connect, held) != 0) {
      answer_connect(notify, held->request.id, 0);
      free(held);
    } else {
      pthread_detach(thread);
    }
  }
}

/**
 * Holds the command's connect() calls for the forwarder (seccomp user notification); the listener's fd goes to the
 * forwarder over `channel`. Where the kernel refuses (no seccomp, no notifications), the command runs without it.
 */
static void hold_connects(int channel) {
  struct sock_filter filter[] = {
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, AUDIT_ARCH_NATIVE, 1, 0),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
      BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
      BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_connect, 0, 1),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_USER_NOTIF),
      BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
  };
  struct sock_fprog program = {.len = sizeof filter / sizeof filter[0], .filter = filter};
  int notify = (int)syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, SECCOMP_FILTER_FLAG_NEW_LISTENER, &program);
  char none = 0;
  struct iovec data = {&none, 1};
  union {
    char buffer[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control = {0};
  struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1};
  if (notify >= 0) {
    message.msg_control = control.buffer;
    message.msg_controllen = sizeof control.buffer;
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    header->cmsg_level = SOL_SOCKET;
    header->cmsg_type = SCM_RIGHTS;
    header->cmsg_len = CMSG_LEN(sizeof(int));
    memcpy(CMSG_DATA(header), &notify, sizeof notify);
  }
  sendmsg(channel, &message, 0);
  if (notify >= 0) close(notify);
  close(channel);
}

/** The listener of held connects, from the launcher (-1 when it could not install one). */
static int receive_notify_fd(int channel) {
  char none;
  struct iovec data = {&none, 1};
  union {
    char buffer[CMSG_SPACE(sizeof(int))];
    struct cmsghdr align;
  } control;
  struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control.buffer,
                           .msg_controllen = sizeof control.buffer};
  int notify = -1;
  if (recvmsg(channel, &message, MSG_CMSG_CLOEXEC) > 0) {
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (header && header->cmsg_type == SCM_RIGHTS) memcpy(&notify, CMSG_DATA(header), sizeof notify);
  }
  close(channel);
  return notify;
}

/*
 * Published ports (`--publish PORT`, the ports devop steals or mirrors to): the command listens on them inside the
 * namespace, and devop connects to 127.0.0.1:PORT on this machine. A helper left in this machine's namespace listens
 * there once the command listens inside (so that devop's wait for the command to listen still means it), and hands
 * each connection (its file descriptor, over a socket pair) to the forwarder, which connects to the command inside.
 */
#define MAX_PUBLISHED 64
static int published[MAX_PUBLISHED], published_count;

/** Whether something in this process's network namespace listens on TCP port `port` (/proc/net/tcp and tcp6). */
static int listens_inside(int port) {
  const char *files[] = {"/proc/self/net/tcp", "/proc/self/net/tcp6"};
  for (int f = 0; f < 2; f++) {
    FILE *file = fopen(files[f], "re");
    if (!file) continue;
    char line[512];
    while (fgets(line, sizeof line, file)) {
      char local[64];
      unsigned state;
      // "  0: 0100007F:1F90 00000000:0000 0A …": the local address's port in hex, then the state (0A: LISTEN).
      if (sscanf(line, " %*d: %63s %*s %x", local, &state) != 2 || state != 0x0a) continue;
      const char *colon = strrchr(local, ':');
      if (colon && (int)strtol(colon + 1, NULL, 16) == port) {
        fclose(file);
        return 1;
      }
    }
    fclose(file);
  }
  return 0;
}

/** The forwarder's side: tells the helper each published port the command listens on, as soon as it does. */
static void *announce_listeners(void *argument) {
  int relay = (int)(intptr_t)argument;
  int announced[MAX_PUBLISHED] = {0}, left = published_count;
  while (left > 0) {
    for (int i = 0; i < published_count; i++) {
      if (announced[i] || !listens_inside(published[i])) continue;
      announced[i] = 1;
      left--;
      if (send(relay, &published[i], sizeof published[i], MSG_NOSIGNAL) < 0) return NULL;
    }
    usleep(50 * 1000);
  }
  return NULL;
}

struct inbound {
  int client, port;
};

static void *serve_inbound(void *argument) {
  struct inbound *in = argument;
  struct sockaddr_in inside4 = {.sin_family = AF_INET, .sin_port = htons((uint16_t)in->port),
                                .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
  struct sockaddr_in6 inside6 = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)in->port),
                                 .sin6_addr = IN6ADDR_LOOPBACK_INIT};
  struct sockaddr_storage destination = {0};
  memcpy(&destination, &inside4, sizeof inside4);
  int inside = connect_inside(&destination);
  if (inside < 0) {
    memset(&destination, 0, sizeof destination);
    memcpy(&destination, &inside6, sizeof inside6);
    inside = connect_inside(&destination);
  }
  if (inside < 0) {
    reset(in->client);
  } else {
    splice_both(in->client, inside);
    close(inside);
    close(in->client);
  }
  free(in);
  return NULL;
}

/** The forwarder's side: each connection the helper accepted, joined with one to the command inside. */
static void *receive_inbound(void *argument) {
  int relay = (int)(intptr_t)argument;
  for (;;) {
    int port = 0;
    struct iovec data = {&port, sizeof port};
    union {
      char buffer[CMSG_SPACE(sizeof(int))];
      struct cmsghdr align;
    } control;
    struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control.buffer,
                             .msg_controllen = sizeof control.buffer};
    ssize_t n = recvmsg(relay, &message, MSG_CMSG_CLOEXEC);
    if (n <= 0) {
      if (n < 0 && errno == EINTR) continue;
      return NULL;
    }
    struct cmsghdr *header = CMSG_FIRSTHDR(&message);
    if (!header || header->cmsg_type != SCM_RIGHTS) continue;
    struct inbound *in = malloc(sizeof *in);
    if (!in) continue;
    memcpy(&in->client, CMSG_DATA(header), sizeof in->client);
    in->port = port;
    pthread_t thread;
    if (pthread_create(&thread, NULL, serve_inbound, in) == 0) pthread_detach(thread);
    else {
      reset(in->client);
      free(in);
    }
  }
}

/** The helper in this machine's namespace: listens on 127.0.0.1:PORT when told, passes each connection on. */
static void host_relay(int relay) {
  signal(SIGPIPE, SIG_IGN);
  struct pollfd fds[1 + MAX_PUBLISHED];
  int ports[1 + MAX_PUBLISHED], count = 1;
  fds[0] = (struct pollfd){.fd = relay, .events = POLLIN};
  for (;;) {
    if (poll(fds, (nfds_t)count, -1) < 0) {
      if (errno == EINTR) continue;
      _exit(1);
    }
    if (fds[0].revents) {
      int port;
      // The forwarder ended (the command and its children did): so does the helper.
      if (recv(relay, &port, sizeof port, 0) != sizeof port) _exit(0);
      struct sockaddr_in address = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port),
                                    .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
      int listener = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
      int one = 1;
      setsockopt(listener, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
      if (count < 1 + MAX_PUBLISHED && bind(listener, (struct sockaddr *)&address, sizeof address) == 0 &&
          listen(listener, 128) == 0) {
        ports[count] = port;
        fds[count++] = (struct pollfd){.fd = listener, .events = POLLIN};
      } else {
        fprintf(stderr, "devop-netns: cannot listen on 127.0.0.1:%d of this machine for the command's port: %s\n",
                port, strerror(errno));
        close(listener);
      }
    }
    for (int i = 1; i < count; i++) {
      if (!(fds[i].revents & POLLIN)) continue;
      int client = accept4(fds[i].fd, NULL, NULL, SOCK_CLOEXEC);
      if (client < 0) continue;
      struct iovec data = {&ports[i], sizeof ports[i]};
      union {
        char buffer[CMSG_SPACE(sizeof(int))];
        struct cmsghdr align;
      } control = {0};
      struct msghdr message = {.msg_iov = &data, .msg_iovlen = 1, .msg_control = control.buffer,
                               .msg_controllen = sizeof control.buffer};
      struct cmsghdr *header = CMSG_FIRSTHDR(&message);
      header->cmsg_level = SOL_SOCKET;
      header->cmsg_type = SCM_RIGHTS;
      header->cmsg_len = CMSG_LEN(sizeof(int));
      memcpy(CMSG_DATA(header), &client, sizeof client);
      sendmsg(relay, &message, MSG_NOSIGNAL);
      close(client);
    }
  }
}

/** The forwarder's loop: until every process holding the lifeline's write end (the command and its children) ended. */
static void forward(int sockets[4], int lifeline, int channel, int relay) {
  signal(SIGPIPE, SIG_IGN);
  if (relay >= 0) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, announce_listeners, (void *)(intptr_t)relay) == 0) pthread_detach(thread);
    if (pthread_create(&thread, NULL, receive_inbound, (void *)(intptr_t)relay) == 0) pthread_detach(thread);
  }
  int notify = receive_notify_fd(channel);
  if (notify >= 0) {
    pthread_t thread;
    if (pthread_create(&thread, NULL, receive_connects, (void *)(intptr_t)notify) == 0) pthread_detach(thread);
  }
  struct pollfd fds[5];
  for (int i = 0; i < 4; i++) fds[i] = (struct pollfd){.fd = sockets[i], .events = POLLIN};
  fds[4] = (struct pollfd){.fd = lifeline, .events = POLLIN};
  for (;;) {
    if (poll(fds, 5, -1) < 0) {
      if (errno == EINTR) continue;
      exit(1);
    }
    if (fds[4].revents) exit(0);
    for (int i = 0; i < 2; i++) {
      if (!(fds[i].revents & POLLIN)) continue;
      int client = accept4(sockets[i], NULL, NULL, SOCK_CLOEXEC);
      if (client >= 0) start_thread(serve_connection, (void *)(intptr_t)client);
    }
    for (int i = 2; i < 4; i++) {
      if (!(fds[i].revents & POLLIN)) continue;
      struct datagram *query = malloc(sizeof *query);
      if (!query) continue;
      query->fd = sockets[i];
      query->from_length = sizeof query->from;
      ssize_t n = recvfrom(sockets[i], query->data, sizeof query->data, 0, (struct sockaddr *)&query->from,
                           &query->from_length);
      if (n <= 0) {
        free(query);
        continue;
      }
      query->length = (int)n;
      start_thread(serve_datagram, query);
    }
  }
}

int main(int argc, char **argv) {
  int first = 1;
  for (; first + 1 < argc && strcmp(argv[first], "--publish") == 0; first += 2) {
    int port = atoi(argv[first + 1]);
    if (port < 1 || port > 65535 || published_count == MAX_PUBLISHED) die("--publish %s: not a port", argv[first + 1]);
    published[published_count++] = port;
  }
  if (first < argc && strcmp(argv[first], "--") == 0) first++;
  if (first >= argc)
    die("usage: devop-netns [--publish PORT]... [--] COMMAND [ARGS...] (devop exec --outgoing-netns runs it)");
  devop_socket = getenv("DEVOP_NETNS_SOCKET");
  const char *secret = getenv("DEVOP_NETNS_TOKEN");
  if (!devop_socket || !*devop_socket || !secret || strlen(secret) >= sizeof token || strchr(secret, ' '))
    die("DEVOP_NETNS_SOCKET and DEVOP_NETNS_TOKEN are not set: devop exec --outgoing-netns sets them");
  strcpy(token, secret);
  unsetenv("DEVOP_NETNS_TOKEN");

  // The helper for published ports stays in this machine's namespaces: forked (twice, so that it is no child of the
  // command) before they are left.
  int relay[2] = {-1, -1};
  if (published_count > 0) {
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, relay) != 0) die("socketpair: %s", strerror(errno));
    pid_t helper = fork();
    if (helper < 0) die("fork: %s", strerror(errno));
    if (helper == 0) {
      if (fork() != 0) _exit(0);
      close(relay[1]);
      host_relay(relay[0]);
      _exit(0);
    }
    waitpid(helper, NULL, 0);
    close(relay[0]);
  }

  enter_namespaces();
  set_up_loopback();
  int dns_port4 = 0, dns_port6 = 0;
  int sockets[4] = {
      loopback_socket(AF_INET, SOCK_STREAM, &tcp_port4),
      loopback_socket(AF_INET6, SOCK_STREAM, &tcp_port6),
      loopback_socket(AF_INET, SOCK_DGRAM, &dns_port4),
      loopback_socket(AF_INET6, SOCK_DGRAM, &dns_port6),
  };
  if (sockets[0] < 0 || sockets[2] < 0) die("cannot listen on 127.0.0.1 in the namespace: %s", strerror(errno));
  install_rules(tcp_port4, sockets[1] >= 0 ? tcp_port6 : 0, dns_port4, sockets[3] >= 0 ? dns_port6 : 0);

  // The lifeline: the command (and whatever inherits it) holds the write end; when the last holder ends, the forwarder
  // sees the pipe close and exits, so the command's process group empties when the command's processes do.
  int lifeline[2], channel[2];
  if (pipe(lifeline) != 0 || socketpair(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0, channel) != 0)
    die("pipe: %s", strerror(errno));
  fcntl(lifeline[0], F_SETFD, FD_CLOEXEC);
  pid_t middle = fork();
  if (middle < 0) die("fork: %s", strerror(errno));
  if (middle == 0) {
    // Twice forked: the forwarder is no child of the command, whose shell would otherwise wait for it.
    if (fork() != 0) _exit(0);
    close(lifeline[1]);
    close(channel[0]);
    forward(sockets, lifeline[0], channel[1], relay[1]);
    _exit(0);
  }
  waitpid(middle, NULL, 0);
  close(lifeline[0]);
  close(channel[1]);
  if (relay[1] >= 0) close(relay[1]);
  hold_connects(channel[0]);
  for (int i = 0; i < 4; i++)
    if (sockets[i] >= 0) close(sockets[i]);
  execvp(argv[first], argv + first);
  die("cannot run %s: %s", argv[first], strerror(errno));
}
