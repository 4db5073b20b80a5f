// devop-outgoing.so: the LD_PRELOAD shim that `devop exec` gives dynamically linked local commands (Python, Java, Ruby,
// C… on glibc/Linux) so that their raw TCP connections and name lookups reach the cluster, as the Node preload
// (cli/preload/) does for Node. It speaks the same control protocol (cli/outgoing/control-protocol.ts: JSON lines on
// the session's proxy port, a hello with the token from DEVOP_PRELOAD_CONFIG first):
//
// - getaddrinfo / gethostbyname of a name the outgoing rules send to the cluster: a `lookup` answered with the pod's
//   DNS; the addresses are remembered, so that a connect to one of them goes to the cluster too. A name the cluster
//   does not know is EAI_NONAME (HOST_NOT_FOUND).
// - connect() of a TCP socket (AF_INET, or AF_INET6 with an IPv4-mapped or plain IPv6 destination) to an address the
//   rules or the remembered answers send to the cluster: a `connect` makes devop dial through the agent first; on
//   success the program's socket really connects to the one-shot loopback port that carries the bytes and claims it
//   by its local port (`claim`); a failed dial is the program's ECONNREFUSED / ENETUNREACH / ETIMEDOUT. The control
//   exchange is synchronous with a deadline; the real connect keeps the socket's own mode, so a non-blocking socket
//   still sees EINPROGRESS (asyncio, Java NIO).
//
// - UDP sockets (connect() then send/recv, or sendto/sendmsg without connect) to a destination the rules send to the
//   cluster, and DNS queries a program sends itself to a nameserver of this machine's resolv.conf (port 53): a `udp`
//   request gets a loopback relay port of devop's for (the socket's local port, the destination), and the datagram
//   really goes there; devop sends it from the pod (DNS: to the pod's own nameserver) and relays the replies back.
//   recvfrom/recvmsg/recvmmsg/getpeername show the relay as the original destination, so a resolver that checks where
//   its answer came from (dnspython, BIND's dig) takes it. res_query / res_nquery of a name the rules send to the
//   cluster (glibc's resolver sends from inside libc, where no call is interposed) are asked the same way.
//
// Everything else is passed on untouched: Unix sockets, loopback and excluded destinations (decided here, with no
// round trip), and every call when DEVOP_PRELOAD_CONFIG is absent or devop's proxy is gone (the real call then runs as if the
// shim were not there). Each control exchange uses its own connection, so threads and forked children share nothing
// but the remembered addresses (under a mutex).
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <ctype.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <resolv.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#define EXPORT __attribute__((visibility("default")))

/** As the Node preload: bounds a wedged proxy, not the agent's dial (which answers as fast as the pod does). */
#define DEFAULT_TIMEOUT_MS 20000
/** Remembered cluster addresses (the table is cleared when full, as the Node preload's set is). */
#define MAX_REMEMBERED 4096
#define MAX_RULES 256
#define MAX_ANSWER 16384
#define MAX_ADDRESSES 64

typedef int (*connect_fn)(int, const struct sockaddr *, socklen_t);
typedef int (*getaddrinfo_fn)(const char *, const char *, const struct addrinfo *, struct addrinfo **);
typedef struct hostent *(*gethostbyname_fn)(const char *);
typedef ssize_t (*sendto_fn)(int, const void *, size_t, int, const struct sockaddr *, socklen_t);
typedef ssize_t (*sendmsg_fn)(int, const struct msghdr *, int);
typedef ssize_t (*recvfrom_fn)(int, void *, size_t, int, struct sockaddr *, socklen_t *);
typedef ssize_t (*recvmsg_fn)(int, struct msghdr *, int);
typedef int (*recvmmsg_fn)(int, struct mmsghdr *, unsigned int, int, struct timespec *);
typedef int (*getpeername_fn)(int, struct sockaddr *, socklen_t *);

static sendto_fn real_sendto;
static sendmsg_fn real_sendmsg;
static recvfrom_fn real_recvfrom;
static recvmsg_fn real_recvmsg;
static recvmmsg_fn real_recvmmsg;
static getpeername_fn real_getpeername;
static connect_fn real_connect;
static getaddrinfo_fn real_getaddrinfo;
static gethostbyname_fn real_gethostbyname;

/** One outgoing rule (cli/outgoing/filters.ts): a host glob, an IPv4/IPv6 CIDR or a port range alone. */
struct rule {
  enum { RULE_HOST, RULE_CIDR, RULE_PORT } kind;
  char glob[254];
  int family; /* 4 or 6 */
  uint8_t network[16];
  int prefix;
  int port_from, port_to; /* 0 = any port */
};

static struct {
  int enabled;
  char host[64];
  int port;
  char token[260];
  int timeout_ms;
  struct rule include[MAX_RULES];
  int includes;
  struct rule exclude[MAX_RULES];
  int excludes;
} config;

/** What stays local whatever the rules say (filters.ts ALWAYS_LOCAL). */
static const char *const ALWAYS_LOCAL[] = {"localhost", "*.localhost", "127.0.0.0/8", "::1", "0.0.0.0", "::"};

static pthread_once_t init_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t remembered_lock = PTHREAD_MUTEX_INITIALIZER;
static struct remembered {
  int family;
  uint8_t address[16];
} remembered[MAX_REMEMBERED];
static int remembered_count;

/* ---------------------------------------------------------------- rules */

static int parse_port_range(const char *text, int *from, int *to) {
  char *end;
  long low = strtol(text, &end, 10);
  long high = low;
  if (end == text) return -1;
  if (*end == '-') {
    const char *rest = end + 1;
    high = strtol(rest, &end, 10);
    if (end == rest) return -1;
  }
  if (*end || low < 1 || high > 65535 || low > high) return -1;
  *from = (int)low;
  *to = (int)high;
  return 0;
}

/** Parses an address literal (no brackets) into 16 bytes; an IPv4 address is its 4 bytes. Returns 4, 6 or 0. */
static int parse_address(const char *text, uint8_t out[16]) {
  memset(out, 0, 16);
  if (inet_pton(AF_INET, text, out) == 1) return 4;
  if (inet_pton(AF_INET6, text, out) == 1) return 6;
  return 0;
}

/** The rule syntax of filters.ts parseOutgoingRule; the CLI has validated each rule, so a bad one is just skipped. */
static int parse_rule(const char *input, struct rule *rule) {
  char text[300], host[300];
  const char *ports = NULL;
  snprintf(text, sizeof text, "%s", input);
  memset(rule, 0, sizeof *rule);
  snprintf(host, sizeof host, "%s", text);
  if (text[0] == '[') {
    char *close = strchr(text, ']');
    if (!close) return -1;
    *close = 0;
    snprintf(host, sizeof host, "%s", text + 1);
    char *rest = close + 1;
    if (*rest == '/') {
      char *colon = strchr(rest, ':');
      if (colon) *colon = 0;
      strncat(host, rest, sizeof host - strlen(host) - 1);
      if (colon) ports = colon + 1;
    } else if (*rest == ':') {
      ports = rest + 1;
    }
  } else {
    char *first = strchr(text, ':');
    if (first && !strchr(first + 1, ':')) {
      *first = 0;
      snprintf(host, sizeof host, "%s", text);
      ports = first + 1;
    }
  }
  if (ports && parse_port_range(ports, &rule->port_from, &rule->port_to) < 0) return -1;
  if (host[0] == 0 || strcmp(host, "*") == 0) {
    if (!ports) return -1;
    rule->kind = RULE_PORT;
    return 0;
  }
  char *slash = strchr(host, '/');
  if (slash) *slash = 0;
  int family = parse_address(host, rule->network);
  if (family) {
    int bits = family == 4 ? 32 : 128;
    rule->kind = RULE_CIDR;
    rule->family = family;
    rule->prefix = slash ? atoi(slash + 1) : bits;
    if (rule->prefix < 0 || rule->prefix > bits) return -1;
    return 0;
  }
  if (slash) return -1;
  rule->kind = RULE_HOST;
  size_t length = strlen(host);
  if (length > 0 && host[length - 1] == '.') host[--length] = 0;
  if (length >= sizeof rule->glob) return -1;
  for (size_t i = 0; i < length; i++) rule->glob[i] = (char)tolower((unsigned char)host[i]);
  return 0;
}

/** `*` matches any run of characters (dots included), as filters.ts's glob regex does; the name is lower case. */
static int glob_matches(const char *glob, const char *name) {
  if (*glob == 0) return *name == 0;
  if (*glob == '*') {
    for (const char *at = name;; at++) {
      if (glob_matches(glob + 1, at)) return 1;
      if (*at == 0) return 0;
    }
  }
  return *name && *glob == *name && glob_matches(glob + 1, name + 1);
}

static int prefix_matches(const uint8_t *a, const uint8_t *b, int prefix) {
  int whole = prefix / 8, rest = prefix % 8;
  if (memcmp(a, b, (size_t)whole) != 0) return 0;
  if (rest == 0) return 1;
  uint8_t mask = (uint8_t)(0xff << (8 - rest));
  return (a[whole] & mask) == (b[whole] & mask);
}

/**
 * A destination: a lower-case name (then family 0) or an address (family 4 or 6; an IPv4-mapped IPv6 address is given
 * as IPv4), and a port (0 for a lookup: port rules match any lookup, as in filters.ts).
 */
struct destination {
  const char *name;
  int family;
  uint8_t address[16];
  int port;
};

static int rule_matches(const struct rule *rule, const struct destination *to) {
  if (rule->port_from && to->port && (to->port < rule->port_from || to->port > rule->port_to)) return 0;
  if (rule->kind == RULE_PORT) return 1;
  if (rule->kind == RULE_HOST) {
    if (to->name) return glob_matches(rule->glob, to->name);
    char text[INET6_ADDRSTRLEN];
    inet_ntop(to->family == 4 ? AF_INET : AF_INET6, to->address, text, sizeof text);
    return glob_matches(rule->glob, text);
  }
  if (to->family != rule->family) return 0;
  return prefix_matches(to->address, rule->network, rule->prefix);
}

static int is_remembered(const struct destination *to) {
  int found = 0;
  pthread_mutex_lock(&remembered_lock);
  for (int i = 0; i < remembered_count && !found; i++) {
    found = remembered[i].family == to->family &&
            memcmp(remembered[i].address, to->address, to->family == 4 ? 4 : 16) == 0;
  }
  pthread_mutex_unlock(&remembered_lock);
  return found;
}

static void remember(int family, const uint8_t *address) {
  struct destination probe = {.family = family};
  memcpy(probe.address, address, family == 4 ? 4 : 16);
  if (is_remembered(&probe)) return;
  pthread_mutex_lock(&remembered_lock);
  if (remembered_count >= MAX_REMEMBERED) remembered_count = 0;
  remembered[remembered_count].family = family;
  memcpy(remembered[remembered_count].address, address, 16);
  remembered_count++;
  pthread_mutex_unlock(&remembered_lock);
}

/** filters.ts routeOf with the Node preload's router on top: 1 = through the cluster, 0 = local. */
static int goes_to_cluster(const struct destination *to) {
  for (int i = 0; i < config.excludes; i++)
    if (rule_matches(&config.exclude[i], to)) return 0;
  if (to->family && is_remembered(to)) return 1;
  if (config.includes == 0) return 1;
  for (int i = 0; i < config.includes; i++)
    if (rule_matches(&config.include[i], to)) return 1;
  return 0;
}

/* ---------------------------------------------------------------- JSON (only what devop writes) */

/**
 * Where the value of "key" starts in `json` (devop writes it: no escapes in the values read here). The key is searched
 * with its quotes and colon, which a string value cannot contain unescaped.
 */
static const char *json_find(const char *json, const char *key) {
  char pattern[64];
  snprintf(pattern, sizeof pattern, "\"%s\":", key);
  const char *at = strstr(json, pattern);
  return at ? at + strlen(pattern) : NULL;
}

static int json_string(const char *json, const char *key, char *out, size_t size) {
  const char *at = json_find(json, key);
  if (!at || *at != '"') return -1;
  const char *end = strchr(++at, '"');
  if (!end || (size_t)(end - at) >= size) return -1;
  memcpy(out, at, (size_t)(end - at));
  out[end - at] = 0;
  return 0;
}

static long json_number(const char *json, const char *key, long otherwise) {
  const char *at = json_find(json, key);
  if (!at) return otherwise;
  char *end;
  long value = strtol(at, &end, 10);
  return end == at ? otherwise : value;
}

/** The rules in the string array "key", appended to `rules`. */
static void json_strings(const char *json, const char *key, struct rule *rules, int *count) {
  const char *at = json_find(json, key);
  if (!at || *at != '[') return;
  at++;
  while (*at == '"' && *count < MAX_RULES) {
    const char *end = strchr(at + 1, '"');
    if (!end) return;
    char text[300];
    size_t length = (size_t)(end - at - 1);
    if (length < sizeof text) {
      memcpy(text, at + 1, length);
      text[length] = 0;
      if (parse_rule(text, &rules[*count]) == 0) (*count)++;
    }
    at = end + 1;
    if (*at == ',') at++;
  }
}

/** This machine's nameservers (resolv.conf; none named means 127.0.0.1, as glibc's resolver does). */
#define MAX_NAMESERVERS 3
static struct {
  int family;
  uint8_t address[16];
} nameservers[MAX_NAMESERVERS];
static int nameserver_count;

static void read_nameservers(void) {
  FILE *file = fopen("/etc/resolv.conf", "re");
  char line[512];
  while (file && nameserver_count < MAX_NAMESERVERS && fgets(line, sizeof line, file)) {
    char address[INET6_ADDRSTRLEN + 1];
    if (sscanf(line, " nameserver %46s", address) != 1) continue;
    char *scope = strchr(address, '%');
    if (scope) *scope = 0;
    int family = parse_address(address, nameservers[nameserver_count].address);
    if (family) nameservers[nameserver_count++].family = family;
  }
  if (file) fclose(file);
  if (nameserver_count == 0) nameservers[nameserver_count++].family = parse_address("127.0.0.1", nameservers[0].address);
}

static void init(void) {
  real_sendto = (sendto_fn)dlsym(RTLD_NEXT, "sendto");
  real_sendmsg = (sendmsg_fn)dlsym(RTLD_NEXT, "sendmsg");
  real_recvfrom = (recvfrom_fn)dlsym(RTLD_NEXT, "recvfrom");
  real_recvmsg = (recvmsg_fn)dlsym(RTLD_NEXT, "recvmsg");
  real_recvmmsg = (recvmmsg_fn)dlsym(RTLD_NEXT, "recvmmsg");
  real_getpeername = (getpeername_fn)dlsym(RTLD_NEXT, "getpeername");
  real_connect = (connect_fn)dlsym(RTLD_NEXT, "connect");
  real_getaddrinfo = (getaddrinfo_fn)dlsym(RTLD_NEXT, "getaddrinfo");
  real_gethostbyname = (gethostbyname_fn)dlsym(RTLD_NEXT, "gethostbyname");
  const char *raw = getenv("DEVOP_PRELOAD_CONFIG");
  if (!raw || !real_connect || !real_getaddrinfo) return;
  const char *proxy = json_find(raw, "proxy");
  if (!proxy || json_string(proxy, "host", config.host, sizeof config.host) < 0) return;
  config.port = (int)json_number(proxy, "port", 0);
  if (json_string(raw, "token", config.token, sizeof config.token) < 0 || config.port <= 0) return;
  config.timeout_ms = (int)json_number(raw, "timeoutMs", DEFAULT_TIMEOUT_MS);
  json_strings(raw, "include", config.include, &config.includes);
  for (size_t i = 0; i < sizeof ALWAYS_LOCAL / sizeof *ALWAYS_LOCAL; i++)
    if (parse_rule(ALWAYS_LOCAL[i], &config.exclude[config.excludes]) == 0) config.excludes++;
  json_strings(raw, "exclude", config.exclude, &config.excludes);
  read_nameservers();
  config.enabled = 1;
}

static void ensure_init(void) { pthread_once(&init_once, init); }

/* ---------------------------------------------------------------- control connection */

static long now_ms(void) {
  struct timespec now;
  clock_gettime(CLOCK_MONOTONIC, &now);
  return now.tv_sec * 1000L + now.tv_nsec / 1000000L;
}

/** Opens a control connection and sends the hello; -1 when devop's proxy is not there (the caller falls back). */
static int control_open(void) {
  struct sockaddr_in proxy = {.sin_family = AF_INET, .sin_port = htons((uint16_t)config.port)};
  if (inet_pton(AF_INET, config.host, &proxy.sin_addr) != 1) return -1;
  int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -1;
  int saved = errno;
  if (real_connect(fd, (struct sockaddr *)&proxy, sizeof proxy) < 0) {
    close(fd);
    errno = saved;
    return -1;
  }
  char hello[400];
  int length = snprintf(hello, sizeof hello, "{\"id\":1,\"op\":\"hello\",\"token\":\"%s\"}\n", config.token);
  if (send(fd, hello, (size_t)length, MSG_NOSIGNAL) != length) {
    close(fd);
    errno = saved;
    return -1;
  }
  errno = saved;
  return fd;
}

/** Sends one request and reads its answer line (the only one the proxy writes on this connection) by the deadline. */
static int control_exchange(int fd, const char *request, char *answer, size_t size) {
  size_t length = strlen(request);
  if (send(fd, request, length, MSG_NOSIGNAL) != (ssize_t)length) return -1;
  long deadline = now_ms() + config.timeout_ms;
  size_t got = 0;
  for (;;) {
    long left = deadline - now_ms();
    if (left <= 0) return -1;
    struct pollfd pfd = {.fd = fd, .events = POLLIN};
    int ready = poll(&pfd, 1, (int)left);
    if (ready < 0 && errno == EINTR) continue;
    if (ready <= 0) return -1;
    ssize_t n = recv(fd, answer + got, size - 1 - got, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) return -1;
    got += (size_t)n;
    answer[got] = 0;
    if (memchr(answer, '\n', got)) return 0;
    if (got >= size - 1) return -1;
  }
}

/* ---------------------------------------------------------------- lookups */

/** The pod's DNS answer for `name`: addresses (4-byte or 16-byte) with their family; <0: -1 unknown name, -2 other. */
static int cluster_lookup(const char *name, int family, int families[], uint8_t addresses[][16], int *count) {
  int fd = control_open();
  if (fd < 0) return -3;
  char request[400], answer[MAX_ANSWER];
  if (family)
    snprintf(request, sizeof request, "{\"id\":2,\"op\":\"lookup\",\"name\":\"%s\",\"family\":%d}\n", name, family);
  else
    snprintf(request, sizeof request, "{\"id\":2,\"op\":\"lookup\",\"name\":\"%s\"}\n", name);
  int saved = errno;
  int status = control_exchange(fd, request, answer, sizeof answer);
  close(fd);
  errno = saved;
  if (status < 0) return -2;
  if (!strstr(answer, "\"ok\":true")) {
    char code[32] = "";
    json_string(answer, "code", code, sizeof code);
    return strcmp(code, "ENOTFOUND") == 0 ? -1 : -2;
  }
  *count = 0;
  const char *at = answer;
  // {"id":2,"ok":true,"addresses":[{"address":"10.96.0.10","family":4},…]}
  while (*count < MAX_ADDRESSES && (at = json_find(at, "address")) && *at == '"') {
    const char *end = strchr(++at, '"');
    char text[INET6_ADDRSTRLEN + 1];
    if (!end || (size_t)(end - at) >= sizeof text) break;
    memcpy(text, at, (size_t)(end - at));
    text[end - at] = 0;
    int got = parse_address(text, addresses[*count]);
    if (got && (!family || family == got)) {
      families[*count] = got;
      remember(got, addresses[*count]);
      (*count)++;
    }
    at = end;
  }
  return *count > 0 ? 0 : -1;
}

/** A lower-case copy of a name, without a trailing dot; 0 when it is an address literal or not a plain name. */
static int lookup_name(const char *node, char *out, size_t size) {
  size_t length = strlen(node);
  if (length == 0 || length >= size || length > 253) return 0;
  for (size_t i = 0; i < length; i++) {
    unsigned char c = (unsigned char)node[i];
    if (!isalnum(c) && c != '-' && c != '.' && c != '_') return 0;
    out[i] = (char)tolower(c);
  }
  out[length] = 0;
  if (out[length - 1] == '.') out[length - 1] = 0;
  uint8_t ignored[16];
  return parse_address(out, ignored) == 0;
}

static int wants_cluster_name(const char *node, char *name, size_t size) {
  if (!node || !lookup_name(node, name, size)) return 0;
  struct destination to = {.name = name};
  return goes_to_cluster(&to);
}

static int service_port(const char *service, int socktype, int flags, int *port) {
  *port = 0;
  if (!service) return 0;
  char *end;
  long value = strtol(service, &end, 10);
  if (*service && !*end && value >= 0 && value <= 65535) {
    *port = (int)value;
    return 0;
  }
  if (flags & AI_NUMERICSERV) return EAI_NONAME;
  struct servent entry, *found = NULL;
  char buffer[1024];
  getservbyname_r(service, socktype == SOCK_DGRAM ? "udp" : "tcp", &entry, buffer, sizeof buffer, &found);
  if (!found) return EAI_SERVICE;
  *port = ntohs((uint16_t)found->s_port);
  return 0;
}

/**
 * One addrinfo in the layout glibc's freeaddrinfo frees (the struct and its sockaddr in one allocation, the canonical
 * name apart), so the program frees the shim's answers with the call it already makes.
 */
static struct addrinfo *new_addrinfo(int family, const uint8_t *address, int port, int socktype, int protocol,
                                     int flags) {
  socklen_t length = family == 4 ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6);
  struct addrinfo *entry = calloc(1, sizeof *entry + length);
  if (!entry) return NULL;
  entry->ai_flags = flags;
  entry->ai_family = family == 4 ? AF_INET : AF_INET6;
  entry->ai_socktype = socktype;
  entry->ai_protocol = protocol;
  entry->ai_addrlen = length;
  entry->ai_addr = (struct sockaddr *)(entry + 1);
  if (family == 4) {
    struct sockaddr_in *in = (struct sockaddr_in *)entry->ai_addr;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    memcpy(&in->sin_addr, address, 4);
  } else {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)entry->ai_addr;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)port);
    memcpy(&in6->sin6_addr, address, 16);
  }
  return entry;
}

EXPORT int getaddrinfo(const char *node, const char *service, const struct addrinfo *hints, struct addrinfo **res) {
  ensure_init();
  if (!real_getaddrinfo) return EAI_SYSTEM;
  char name[256];
  int flags = hints ? hints->ai_flags : 0;
  int wanted = hints ? hints->ai_family : AF_UNSPEC;
  if (!config.enabled || (flags & AI_NUMERICHOST) || (wanted != AF_UNSPEC && wanted != AF_INET && wanted != AF_INET6) ||
      !wants_cluster_name(node, name, sizeof name)) {
    return real_getaddrinfo(node, service, hints, res);
  }
  int socktype = hints ? hints->ai_socktype : 0;
  int protocol = hints ? hints->ai_protocol : 0;
  int port;
  int bad_service = service_port(service, socktype, flags, &port);
  if (bad_service) return bad_service;
  int families[MAX_ADDRESSES], count = 0;
  uint8_t addresses[MAX_ADDRESSES][16];
  int status = cluster_lookup(name, wanted == AF_INET ? 4 : wanted == AF_INET6 ? 6 : 0, families, addresses, &count);
  if (status == -3) return real_getaddrinfo(node, service, hints, res);
  if (status == -1) return EAI_NONAME;
  if (status < 0) return EAI_AGAIN;
  // As glibc: without a socket type in the hints, one entry per type for each address.
  static const int TYPES[][2] = {{SOCK_STREAM, IPPROTO_TCP}, {SOCK_DGRAM, IPPROTO_UDP}, {SOCK_RAW, 0}};
  struct addrinfo *head = NULL, **tail = &head;
  for (int i = 0; i < count; i++) {
    for (size_t t = 0; t < 3; t++) {
      if (socktype && socktype != TYPES[t][0]) continue;
      int entry_protocol = protocol ? protocol : TYPES[t][1];
      struct addrinfo *entry = new_addrinfo(families[i], addresses[i], port, TYPES[t][0], entry_protocol, flags);
      if (!entry) {
        if (head) freeaddrinfo(head);
        return EAI_MEMORY;
      }
      *tail = entry;
      tail = &entry->ai_next;
    }
  }
  if (head && (flags & AI_CANONNAME)) head->ai_canonname = strdup(name);
  *res = head;
  return head ? 0 : EAI_NONAME;
}

/** gethostbyname's answer lives until the thread's next call, as glibc's does (which keeps it per process). */
static __thread struct {
  struct hostent entry;
  char name[256];
  char *aliases[1];
  char *list[MAX_ADDRESSES + 1];
  uint8_t addresses[MAX_ADDRESSES][16];
} host_answer;

EXPORT struct hostent *gethostbyname(const char *node) {
  ensure_init();
  char name[256];
  if (!config.enabled || !wants_cluster_name(node, name, sizeof name))
    return real_gethostbyname ? real_gethostbyname(node) : NULL;
  int families[MAX_ADDRESSES], count = 0;
  int status = cluster_lookup(name, 4, families, host_answer.addresses, &count);
  if (status == -3) return real_gethostbyname ? real_gethostbyname(node) : NULL;
  if (status < 0) {
    h_errno = status == -1 ? HOST_NOT_FOUND : TRY_AGAIN;
    return NULL;
  }
  snprintf(host_answer.name, sizeof host_answer.name, "%s", name);
  host_answer.aliases[0] = NULL;
  for (int i = 0; i < count; i++) host_answer.list[i] = (char *)host_answer.addresses[i];
  host_answer.list[count] = NULL;
  host_answer.entry = (struct hostent){
      .h_name = host_answer.name,
      .h_aliases = host_answer.aliases,
      .h_addrtype = AF_INET,
      .h_length = 4,
      .h_addr_list = host_answer.list,
  };
  return &host_answer.entry;
}

/* ---------------------------------------------------------------- connect */

/** The errno a program gets for the agent's failed dial (cli/outgoing/dialer.ts codes). */
static int dial_errno(const char *code) {
  static const struct {
    const char *name;
    int value;
  } CODES[] = {{"ECONNREFUSED", ECONNREFUSED}, {"ENETUNREACH", ENETUNREACH}, {"EHOSTUNREACH", EHOSTUNREACH},
               {"ETIMEDOUT", ETIMEDOUT},       {"ECONNRESET", ECONNRESET},   {"EACCES", EACCES}};
  for (size_t i = 0; i < sizeof CODES / sizeof *CODES; i++)
    if (strcmp(code, CODES[i].name) == 0) return CODES[i].value;
  return ECONNREFUSED;
}

/** An IPv4/IPv6 socket address as a destination (an IPv4-mapped address as IPv4); 0 for anything else or port 0. */
static int parse_destination(const struct sockaddr *address, socklen_t length, struct destination *to) {
  if (!address) return 0;
  if (address->sa_family == AF_INET && length >= sizeof(struct sockaddr_in)) {
    const struct sockaddr_in *in = (const struct sockaddr_in *)address;
    to->family = 4;
    memcpy(to->address, &in->sin_addr, 4);
    to->port = ntohs(in->sin_port);
  } else if (address->sa_family == AF_INET6 && length >= sizeof(struct sockaddr_in6)) {
    const struct sockaddr_in6 *in6 = (const struct sockaddr_in6 *)address;
    to->port = ntohs(in6->sin6_port);
    if (IN6_IS_ADDR_V4MAPPED(&in6->sin6_addr)) {
      to->family = 4;
      memcpy(to->address, in6->sin6_addr.s6_addr + 12, 4);
    } else {
      to->family = 6;
      memcpy(to->address, &in6->sin6_addr, 16);
    }
  } else {
    return 0;
  }
  return to->port != 0;
}

static int socket_type(int fd) {
  int type = 0;
  socklen_t size = sizeof type;
  int saved = errno;
  if (getsockopt(fd, SOL_SOCKET, SO_TYPE, &type, &size) != 0) type = 0;
  errno = saved;
  return type;
}

/** The destination of a connect, when it is TCP over IPv4/IPv6; 0 when the shim has nothing to do with it. */
static int tcp_destination(int fd, const struct sockaddr *address, socklen_t length, struct destination *to) {
  return parse_destination(address, length, to) && socket_type(fd) == SOCK_STREAM;
}

/**
 * Whether the socket has not started connecting. A program may call connect() again on a non-blocking socket to learn
 * how its connect went (Ruby's Socket.tcp does): the kernel answers that (EALREADY, EISCONN) whatever the address, and
 * no new dial must start.
 */
static int unconnected(int fd) {
  struct tcp_info info;
  socklen_t size = sizeof info;
  int saved = errno;
  int closed = getsockopt(fd, IPPROTO_TCP, TCP_INFO, &info, &size) == 0 && info.tcpi_state == TCP_CLOSE;
  errno = saved;
  return closed;
}

static int udp_connect(int fd, const struct sockaddr *address, socklen_t length);

EXPORT int connect(int fd, const struct sockaddr *address, socklen_t length) {
  ensure_init();
  struct destination to = {0};
  if (config.enabled && address && address->sa_family != AF_UNSPEC && socket_type(fd) == SOCK_DGRAM)
    return udp_connect(fd, address, length);
  if (!config.enabled || !tcp_destination(fd, address, length, &to) || !goes_to_cluster(&to) || !unconnected(fd))
    return real_connect(fd, address, length);
  int control = control_open();
  if (control < 0) return real_connect(fd, address, length);
  char host[INET6_ADDRSTRLEN], request[200], answer[MAX_ANSWER];
  inet_ntop(to.family == 4 ? AF_INET : AF_INET6, to.address, host, sizeof host);
  snprintf(request, sizeof request, "{\"id\":2,\"op\":\"connect\",\"host\":\"%s\",\"port\":%d}\n", host, to.port);
  int saved = errno;
  if (control_exchange(control, request, answer, sizeof answer) < 0) {
    close(control);
    errno = ETIMEDOUT;
    return -1;
  }
  long one_shot = json_number(answer, "port", 0);
  if (!strstr(answer, "\"ok\":true") || one_shot <= 0 || one_shot > 65535) {
    char code[32] = "";
    json_string(answer, "code", code, sizeof code);
    close(control);
    errno = dial_errno(code);
    return -1;
  }
  // The socket keeps its family: an IPv6 socket (Java's, dual-stack) reaches the loopback port as ::ffff:127.0.0.1.
  struct sockaddr_storage local = {0};
  socklen_t local_length;
  if (address->sa_family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)&local;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)one_shot);
    inet_pton(AF_INET, config.host, &in->sin_addr);
    local_length = sizeof *in;
  } else {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&local;
    char mapped[80];
    snprintf(mapped, sizeof mapped, "::ffff:%s", config.host);
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons((uint16_t)one_shot);
    inet_pton(AF_INET6, mapped, &in6->sin6_addr);
    local_length = sizeof *in6;
  }
  errno = saved;
  int status = real_connect(fd, (struct sockaddr *)&local, local_length);
  int connect_errno = errno;
  // Claimed by the local port the socket connects from (bound by now, also while a non-blocking connect is under way):
  // devop joins the dialled connection with that connection only.
  struct sockaddr_storage from;
  socklen_t from_length = sizeof from;
  if ((status == 0 || connect_errno == EINPROGRESS) && getsockname(fd, (struct sockaddr *)&from, &from_length) == 0) {
    int from_port = ntohs(from.ss_family == AF_INET ? ((struct sockaddr_in *)&from)->sin_port
                                                    : ((struct sockaddr_in6 *)&from)->sin6_port);
    char claim[120];
    int claim_length =
        snprintf(claim, sizeof claim, "{\"id\":3,\"op\":\"claim\",\"port\":%ld,\"from\":%d}\n", one_shot, from_port);
    send(control, claim, (size_t)claim_length, MSG_NOSIGNAL);
  }
  close(control);
  errno = connect_errno;
  return status;
}

/* ---------------------------------------------------------------- UDP */

#define MAX_UDP_RELAYS 1024

/** devop refused UDP (an agent without it): the process stops asking and its UDP stays local. */
static int udp_refused;
static pthread_mutex_t relays_lock = PTHREAD_MUTEX_INITIALIZER;
/** The relays this process was given: which destination each loopback port stands for, and for which local port. */
static struct relay {
  int relay_port;
  int from_port;
  struct destination to;
} relays[MAX_UDP_RELAYS];
static int relay_count;

static int same_destination(const struct destination *a, const struct destination *b) {
  return a->family == b->family && a->port == b->port && memcmp(a->address, b->address, a->family == 4 ? 4 : 16) == 0;
}

static int is_nameserver(const struct destination *to) {
  if (to->port != 53) return 0;
  for (int i = 0; i < nameserver_count; i++)
    if (nameservers[i].family == to->family &&
        memcmp(nameservers[i].address, to->address, to->family == 4 ? 4 : 16) == 0)
      return 1;
  return 0;
}

/** 1: a datagram to `to` goes through the cluster (2: a DNS query for the pod's nameserver); 0: it stays local. */
static int udp_route(const struct destination *to) {
  if (!config.enabled || udp_refused) return 0;
  if (is_nameserver(to)) return 2;
  return goes_to_cluster(to) ? 1 : 0;
}

/** The socket's local port, binding it to an ephemeral one first when it has none (as its first send would). */
static int local_port(int fd) {
  struct sockaddr_storage local = {0};
  socklen_t length = sizeof local;
  if (getsockname(fd, (struct sockaddr *)&local, &length) != 0) return -1;
  int port = ntohs(local.ss_family == AF_INET ? ((struct sockaddr_in *)&local)->sin_port
                                              : ((struct sockaddr_in6 *)&local)->sin6_port);
  if (port != 0) return port;
  struct sockaddr_storage any = {.ss_family = local.ss_family};
  if (bind(fd, (struct sockaddr *)&any,
           local.ss_family == AF_INET ? sizeof(struct sockaddr_in) : sizeof(struct sockaddr_in6)) != 0)
    return -1;
  length = sizeof local;
  if (getsockname(fd, (struct sockaddr *)&local, &length) != 0) return -1;
  return ntohs(local.ss_family == AF_INET ? ((struct sockaddr_in *)&local)->sin_port
                                          : ((struct sockaddr_in6 *)&local)->sin6_port);
}

/** The relay port for (local port, destination): remembered, or asked of devop. 0: none (the real call goes out). */
static int udp_relay(int fd, const struct destination *to, int route) {
  int saved = errno;
  int from = local_port(fd);
  errno = saved;
  if (from <= 0) return 0;
  pthread_mutex_lock(&relays_lock);
  int found = 0;
  for (int i = 0; i < relay_count && !found; i++)
    if (relays[i].from_port == from && same_destination(&relays[i].to, to)) found = relays[i].relay_port;
  pthread_mutex_unlock(&relays_lock);
  if (found) return found;
  int control = control_open();
  if (control < 0) return 0;
  char host[INET6_ADDRSTRLEN] = "", request[200], answer[MAX_ANSWER];
  if (route == 1) inet_ntop(to->family == 4 ? AF_INET : AF_INET6, to->address, host, sizeof host);
  snprintf(request, sizeof request, "{\"id\":2,\"op\":\"udp\",\"host\":\"%s\",\"port\":%d,\"from\":%d}\n", host,
           to->port, from);
  int status = control_exchange(control, request, answer, sizeof answer);
  close(control);
  errno = saved;
  long port = status == 0 ? json_number(answer, "port", 0) : 0;
  if (status == 0 && !strstr(answer, "\"ok\":true")) {
    char code[32] = "";
    json_string(answer, "code", code, sizeof code);
    if (strcmp(code, "ENOTSUP") == 0) udp_refused = 1;
    return 0;
  }
  if (port <= 0 || port > 65535) return 0;
  pthread_mutex_lock(&relays_lock);
  int slot = relay_count < MAX_UDP_RELAYS ? relay_count++ : 0;
  for (int i = 0; i < relay_count; i++)
    if (relays[i].relay_port == port) slot = i; /* a port devop reused: it stands for this destination now */
  relays[slot] = (struct relay){.relay_port = (int)port, .from_port = from, .to = *to};
  pthread_mutex_unlock(&relays_lock);
  return (int)port;
}

/** The relay's loopback address in the socket's own family (an IPv6 socket reaches it as ::ffff:127.0.0.1). */
static socklen_t relay_address(int family, int port, struct sockaddr_storage *out) {
  memset(out, 0, sizeof *out);
  if (family == AF_INET) {
    struct sockaddr_in *in = (struct sockaddr_in *)out;
    in->sin_family = AF_INET;
    in->sin_port = htons((uint16_t)port);
    inet_pton(AF_INET, config.host, &in->sin_addr);
    return sizeof *in;
  }
  struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)out;
  char mapped[80];
  snprintf(mapped, sizeof mapped, "::ffff:%s", config.host);
  in6->sin6_family = AF_INET6;
  in6->sin6_port = htons((uint16_t)port);
  inet_pton(AF_INET6, mapped, &in6->sin6_addr);
  return sizeof *in6;
}

/** Where a datagram to `address` really goes: the relay's address in `relayed` (returns its length), or 0. */
static socklen_t udp_redirect(int fd, const struct sockaddr *address, socklen_t length,
                              struct sockaddr_storage *relayed) {
  struct destination to = {0};
  if (!config.enabled || !address || !parse_destination(address, length, &to)) return 0;
  int route = udp_route(&to);
  if (!route) return 0;
  int port = udp_relay(fd, &to, route);
  return port ? relay_address(address->sa_family, port, relayed) : 0;
}

static int udp_connect(int fd, const struct sockaddr *address, socklen_t length) {
  struct sockaddr_storage relayed;
  socklen_t relayed_length = udp_redirect(fd, address, length, &relayed);
  if (!relayed_length) return real_connect(fd, address, length);
  return real_connect(fd, (struct sockaddr *)&relayed, relayed_length);
}

EXPORT ssize_t sendto(int fd, const void *buffer, size_t size, int flags, const struct sockaddr *address,
                      socklen_t length) {
  ensure_init();
  struct sockaddr_storage relayed;
  socklen_t relayed_length = 0;
  if (config.enabled && address && socket_type(fd) == SOCK_DGRAM)
    relayed_length = udp_redirect(fd, address, length, &relayed);
  if (relayed_length) return real_sendto(fd, buffer, size, flags, (struct sockaddr *)&relayed, relayed_length);
  return real_sendto(fd, buffer, size, flags, address, length);
}

EXPORT ssize_t sendmsg(int fd, const struct msghdr *message, int flags) {
  ensure_init();
  struct sockaddr_storage relayed;
  socklen_t relayed_length = 0;
  if (config.enabled && message && message->msg_name && socket_type(fd) == SOCK_DGRAM)
    relayed_length = udp_redirect(fd, message->msg_name, message->msg_namelen, &relayed);
  if (!relayed_length) return real_sendmsg(fd, message, flags);
  struct msghdr copy = *message;
  copy.msg_name = &relayed;
  copy.msg_namelen = relayed_length;
  return real_sendmsg(fd, &copy, flags);
}

/**
 * A source address that is one of this process's relays becomes the destination it stands for, written in the
 * family of the caller's buffer (an IPv6 buffer gets an IPv4 destination as ::ffff:a.b.c.d) within its `capacity`.
 */
static void unrelay(struct sockaddr *address, socklen_t *length, socklen_t capacity) {
  if (!address || !length || relay_count == 0) return;
  int port;
  if (address->sa_family == AF_INET && *length >= sizeof(struct sockaddr_in)) {
    struct sockaddr_in *in = (struct sockaddr_in *)address;
    if (ntohl(in->sin_addr.s_addr) != INADDR_LOOPBACK) return;
    port = ntohs(in->sin_port);
  } else if (address->sa_family == AF_INET6 && *length >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)address;
    static const uint8_t MAPPED_LOOPBACK[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 127, 0, 0, 1};
    if (memcmp(&in6->sin6_addr, MAPPED_LOOPBACK, 16) != 0) return;
    port = ntohs(in6->sin6_port);
  } else {
    return;
  }
  struct destination to = {0};
  pthread_mutex_lock(&relays_lock);
  for (int i = 0; i < relay_count && !to.family; i++)
    if (relays[i].relay_port == port) to = relays[i].to;
  pthread_mutex_unlock(&relays_lock);
  if (!to.family) return;
  if (address->sa_family == AF_INET && to.family == 4) {
    struct sockaddr_in *in = (struct sockaddr_in *)address;
    memcpy(&in->sin_addr, to.address, 4);
    in->sin_port = htons((uint16_t)to.port);
  } else if (address->sa_family == AF_INET6 && capacity >= sizeof(struct sockaddr_in6)) {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)address;
    memset(&in6->sin6_addr, 0, 16);
    if (to.family == 4) {
      in6->sin6_addr.s6_addr[10] = 0xff;
      in6->sin6_addr.s6_addr[11] = 0xff;
      memcpy(in6->sin6_addr.s6_addr + 12, to.address, 4);
    } else {
      memcpy(&in6->sin6_addr, to.address, 16);
    }
    in6->sin6_port = htons((uint16_t)to.port);
  }
}

EXPORT ssize_t recvfrom(int fd, void *buffer, size_t size, int flags, struct sockaddr *address, socklen_t *length) {
  ensure_init();
  socklen_t capacity = length ? *length : 0;
  ssize_t got = real_recvfrom(fd, buffer, size, flags, address, length);
  if (got >= 0 && config.enabled) unrelay(address, length, capacity);
  return got;
}

EXPORT ssize_t recvmsg(int fd, struct msghdr *message, int flags) {
  ensure_init();
  socklen_t capacity = message ? message->msg_namelen : 0;
  ssize_t got = real_recvmsg(fd, message, flags);
  if (got >= 0 && config.enabled && message->msg_name)
    unrelay(message->msg_name, &message->msg_namelen, capacity);
  return got;
}

EXPORT int recvmmsg(int fd, struct mmsghdr *messages, unsigned int count, int flags, struct timespec *timeout) {
  ensure_init();
  socklen_t capacities[64];
  for (unsigned int i = 0; i < count && i < 64; i++) capacities[i] = messages[i].msg_hdr.msg_namelen;
  int got = real_recvmmsg(fd, messages, count, flags, timeout);
  for (int i = 0; config.enabled && i < got && i < 64; i++)
    if (messages[i].msg_hdr.msg_name)
      unrelay(messages[i].msg_hdr.msg_name, &messages[i].msg_hdr.msg_namelen, capacities[i]);
  return got;
}

EXPORT int getpeername(int fd, struct sockaddr *address, socklen_t *length) {
  ensure_init();
  socklen_t capacity = length ? *length : 0;
  int status = real_getpeername(fd, address, length);
  if (status == 0 && config.enabled && socket_type(fd) == SOCK_DGRAM) unrelay(address, length, capacity);
  return status;
}

/* ---------------------------------------------------------------- res_query */

typedef int (*res_query_fn)(const char *, int, int, unsigned char *, int);
typedef int (*res_nquery_fn)(res_state, const char *, int, int, unsigned char *, int);

/** Per try of a res_query through the cluster, as glibc's RES_TIMEOUT; two tries, as its default attempts. */
#define RES_TRY_MS 5000

/**
 * The pod's DNS answer for one question, asked as a program's own query to this machine's first nameserver is (so
 * through a relay to the pod's nameserver); its length, or -1 with h_errno set as res_query sets it, or -2 when devop
 * cannot be asked (the real call then runs).
 */
static int cluster_res_query(const char *name, int class, int type, unsigned char *answer, int size) {
  unsigned char query[512];
  int length = res_mkquery(QUERY, name, class, type, NULL, 0, NULL, query, sizeof query);
  if (length < 0) {
    h_errno = NO_RECOVERY;
    return -1;
  }
  int saved = errno;
  int fd = socket(nameservers[0].family == 4 ? AF_INET : AF_INET6, SOCK_DGRAM | SOCK_CLOEXEC, 0);
  if (fd < 0) return -2;
  struct sockaddr_storage server = {0};
  socklen_t server_length;
  if (nameservers[0].family == 4) {
    struct sockaddr_in *in = (struct sockaddr_in *)&server;
    in->sin_family = AF_INET;
    in->sin_port = htons(53);
    memcpy(&in->sin_addr, nameservers[0].address, 4);
    server_length = sizeof *in;
  } else {
    struct sockaddr_in6 *in6 = (struct sockaddr_in6 *)&server;
    in6->sin6_family = AF_INET6;
    in6->sin6_port = htons(53);
    memcpy(&in6->sin6_addr, nameservers[0].address, 16);
    server_length = sizeof *in6;
  }
  struct sockaddr_storage relayed;
  socklen_t relayed_length = udp_redirect(fd, (struct sockaddr *)&server, server_length, &relayed);
  int got = -2;
  for (int attempt = 0; relayed_length && attempt < 2 && got == -2; attempt++) {
    if (real_sendto(fd, query, (size_t)length, 0, (struct sockaddr *)&relayed, relayed_length) != length) break;
    long deadline = now_ms() + RES_TRY_MS;
    for (long left = RES_TRY_MS; left > 0 && got == -2; left = deadline - now_ms()) {
      struct pollfd pfd = {.fd = fd, .events = POLLIN};
      if (poll(&pfd, 1, (int)left) <= 0) continue;
      ssize_t n = real_recvfrom(fd, answer, (size_t)size, 0, NULL, NULL);
      /* Another question's answer (a late one of an earlier try) has another id: wait on. */
      if (n >= HFIXEDSZ && answer[0] == query[0] && answer[1] == query[1]) got = (int)n;
    }
  }
  close(fd);
  errno = saved;
  if (got < 0) {
    if (relayed_length) h_errno = TRY_AGAIN;
    return relayed_length ? -1 : -2;
  }
  /* As res_query: an answer without records, or an error code, is -1 with h_errno saying which. */
  HEADER *header = (HEADER *)answer;
  if (header->rcode != NOERROR || ntohs(header->ancount) == 0) {
    h_errno = header->rcode == NXDOMAIN                              ? HOST_NOT_FOUND
              : header->rcode == SERVFAIL                            ? TRY_AGAIN
              : header->rcode == NOERROR && !ntohs(header->ancount) ? NO_DATA
                                                                     : NO_RECOVERY;
    return -1;
  }
  return got;
}

static int routed_res_query(const char *name, int class, int type, unsigned char *answer, int size) {
  ensure_init();
  char lowered[256];
  if (!config.enabled || udp_refused || !wants_cluster_name(name, lowered, sizeof lowered)) return -2;
  return cluster_res_query(name, class, type, answer, size);
}

EXPORT int res_query(const char *name, int class, int type, unsigned char *answer, int size) {
  int got = routed_res_query(name, class, type, answer, size);
  if (got != -2) return got;
  res_query_fn real = (res_query_fn)dlsym(RTLD_NEXT, "res_query");
  return real ? real(name, class, type, answer, size) : -1;
}

EXPORT int __res_query(const char *name, int class, int type, unsigned char *answer, int size) {
  return res_query(name, class, type, answer, size);
}

EXPORT int res_nquery(res_state state, const char *name, int class, int type, unsigned char *answer, int size) {
  int got = routed_res_query(name, class, type, answer, size);
  if (got != -2) return got;
  res_nquery_fn real = (res_nquery_fn)dlsym(RTLD_NEXT, "res_nquery");
  return real ? real(state, name, class, type, answer, size) : -1;
}

EXPORT int __res_nquery(res_state state, const char *name, int class, int type, unsigned char *answer, int size) {
  return res_nquery(state, name, class, type, answer, size);
}
