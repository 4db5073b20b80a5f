// devop-nft: owns the agent's nftables table (agent/native/nft-owned.ts). It creates the table with `flags owner` on
// its own netlink socket, so the kernel deletes the table the moment this process ends, however it ends; it ends when
// the agent does (its stdin, a pipe from the agent, closes; or the parent-death signal), once the processes the agent
// named with `outlive` have ended (bounded). It replaces a long-lived `nft -i`
// (4.9 MiB of RSS: libnftables, libgmp, libedit, a command parser) with one socket and the four messages the agent
// needs (0.5 MiB, linked statically). Requests on stdin, one answer line each on stdout:
//
//   table NAME             → ok            creates `table inet NAME { flags owner; }` (IPv4 and IPv6), its nat chain
//                                          `pre` and its filter chain `in`
//   add PORT TO            → ok HANDLE     `tcp dport PORT redirect to :TO comment "devop PORT"`
//   add PORT TO SKIP       → ok H1,H2      `ip saddr != SKIP tcp dport PORT redirect …` and `meta nfproto ipv6 tcp
//                                          dport PORT redirect …` (an IPv6 SKIP: ip6 saddr, and the rule for ipv4)
//   delete HANDLE[,HANDLE] → ok            deletes that rule (those rules)
//   guard TO               → ok HANDLE     in `in`: `tcp dport TO ct status & dnat == 0 reject with tcp reset`: the
//                                          agent's listener TO takes only connections a redirect rule sent there
//   unguard HANDLE         → ok            deletes that guard rule
//   drop                   → ok            deletes the table
//   outlive PID            → ok            when the agent dies, delete the redirect rules and wait (up to 1 s) for
//                                          process PID to end before this process ends: devop-splice's redirected
//                                          connections need the table's NAT for their FIN or RST to reach their
//                                          clients (deleting the netns's only nat chain unhooks NAT there)
//   anything that fails    → error WHY     (the process keeps serving requests)
//
// Messages are nfnetlink batches as nft sends them (one transaction each); the rule's expressions are those nft
// generates for the same words, so `nft list ruleset` shows the rule as written above.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/netfilter.h>
#include <linux/netfilter/nf_tables.h>
#include <linux/netfilter/nfnetlink.h>
#include <linux/netlink.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

// One table for both address families (inet: kernel 5.2+ has NAT there), so IPv6 connections are stolen like IPv4 ones.
#define FAMILY NFPROTO_INET
#define CHAIN "pre"
// The nat chain runs at dstnat - 1, before the pod's own nat rules (kube-proxy, CNI, sidecars) at dstnat.
#define PRIORITY (-101)
// The guards' chain: every packet delivered to a local socket of the netns (from the pod network and from loopback
// alike), at the filter priority; the redirect has set the connection's dnat status long before.
#define GUARD_CHAIN "in"
#define GUARD_PRIORITY 0
// The conntrack status bit a redirect (a destination NAT) sets (linux/netfilter/nf_conntrack_common.h: IPS_DST_NAT).
#define STATUS_DST_NAT (1u << 5)
// How long the kernel may take to answer one transaction (it answers in microseconds; this only bounds the wait).
#define ANSWER_TIMEOUT_MS 5000
// nftnl's user data type for a rule's comment (what `nft list` prints as `comment "…"`).
#define UDATA_RULE_COMMENT 0

static int sock;
static uint32_t next_seq = 1;

/** Processes to outlive (pidfds), and how long to wait for them once the agent is gone. */
#define MAX_FOLLOWERS 4
#define FOLLOWER_WAIT_MS 1000
static int followers[MAX_FOLLOWERS];
static int follower_count;

/** The parent-death signal only ends the request loop (fgets returns, no SA_RESTART): the waiting comes after it. */
static void on_parent_gone(int sig) { (void)sig; }

/** Waits until every follower has ended, or FOLLOWER_WAIT_MS have passed. */
static void outlive_followers(void) {
  struct timespec start, now;
  clock_gettime(CLOCK_MONOTONIC, &start);
  for (int i = 0; i < follower_count; i++) {
    for (;;) {
      clock_gettime(CLOCK_MONOTONIC, &now);
      long spent = (now.tv_sec - start.tv_sec) * 1000 + (now.tv_nsec - start.tv_nsec) / 1000000;
      if (spent >= FOLLOWER_WAIT_MS) return;
      struct pollfd p = {.fd = followers[i], .events = POLLIN};
      int n = poll(&p, 1, (int)(FOLLOWER_WAIT_MS - spent));
      if (n >= 0 || errno != EINTR) break; // readable: it ended (or the pidfd broke: nothing to wait for)
    }
  }
}

// ---- building messages ----

struct msg {
  char buf[4096];
  size_t len;         // bytes used in buf (a batch: several netlink messages)
  size_t start;       // where the message being built starts
  size_t nests[8];    // open nested attributes
  int depth;
};

static void *put(struct msg *m, const void *data, size_t len) {
  void *at = m->buf + m->len;
  memcpy(at, data, len);
  memset(m->buf + m->len + len, 0, NLA_ALIGN(len) - len);
  m->len += NLA_ALIGN(len);
  return at;
}

// Starts a netlink message: nfnetlink's header, for `family` (NFPROTO_IPV4, or AF_UNSPEC for the batch markers).
static uint32_t begin(struct msg *m, uint16_t type, uint16_t flags, uint8_t family, uint16_t res_id) {
  m->start = m->len;
  struct nlmsghdr nlh = {.nlmsg_type = type, .nlmsg_flags = NLM_F_REQUEST | flags, .nlmsg_seq = next_seq++};
  put(m, &nlh, sizeof nlh);
  struct nfgenmsg nfg = {.nfgen_family = family, .version = NFNETLINK_V0, .res_id = htons(res_id)};
  put(m, &nfg, sizeof nfg);
  return nlh.nlmsg_seq;
}

static void end(struct msg *m) {
  ((struct nlmsghdr *)(m->buf + m->start))->nlmsg_len = (uint32_t)(m->len - m->start);
}

static void attr(struct msg *m, uint16_t type, const void *data, size_t len) {
  struct nlattr a = {.nla_len = (uint16_t)(NLA_HDRLEN + len), .nla_type = type};
  put(m, &a, sizeof a);
  put(m, data, len);
}
static void attr_str(struct msg *m, uint16_t type, const char *s) { attr(m, type, s, strlen(s) + 1); }
static void attr_u32(struct msg *m, uint16_t type, uint32_t host) {
  uint32_t be = htonl(host);
  attr(m, type, &be, sizeof be);
}
static void attr_u64(struct msg *m, uint16_t type, uint64_t host) {
  uint64_t be = ((uint64_t)htonl((uint32_t)host) << 32) | htonl((uint32_t)(host >> 32));
  attr(m, type, &be, sizeof be);
}

static void nest(struct msg *m, uint16_t type) {
  m->nests[m->depth++] = m->len;
  struct nlattr a = {.nla_type = NLA_F_NESTED | type};
  put(m, &a, sizeof a);
}
static void unnest(struct msg *m) {
  size_t at = m->nests[--m->depth];
  ((struct nlattr *)(m->buf + at))->nla_len = (uint16_t)(m->len - at);
}

// One expression of a rule: NFTA_LIST_ELEM { NAME, DATA { … } }; the caller adds DATA's attributes, then expr_end.
static void expr(struct msg *m, const char *name) {
  nest(m, NFTA_LIST_ELEM);
  attr_str(m, NFTA_EXPR_NAME, name);
  nest(m, NFTA_EXPR_DATA);
}
static void expr_end(struct msg *m) {
  unnest(m);
  unnest(m);
}

static void payload(struct msg *m, uint32_t base, uint32_t offset, uint32_t len) {
  expr(m, "payload");
  attr_u32(m, NFTA_PAYLOAD_DREG, NFT_REG_1);
  attr_u32(m, NFTA_PAYLOAD_BASE, base);
  attr_u32(m, NFTA_PAYLOAD_OFFSET, offset);
  attr_u32(m, NFTA_PAYLOAD_LEN, len);
  expr_end(m);
}

static void cmp(struct msg *m, uint32_t op, const void *value, size_t len) {
  expr(m, "cmp");
  attr_u32(m, NFTA_CMP_SREG, NFT_REG_1);
  attr_u32(m, NFTA_CMP_OP, op);
  nest(m, NFTA_CMP_DATA);
  attr(m, NFTA_DATA_VALUE, value, len);
  unnest(m);
  expr_end(m);
}

// ---- talking to the kernel ----

// Sends the batch and reads until every message in seqs [first, last] is acknowledged or one fails (an error may also
// name the batch's markers, first - 1 and last + 1: e.g. without CAP_NET_ADMIN). The handle of an echoed rule goes to
// *handle. Returns 0 or a negative errno; answers to earlier requests (a failed one's remaining acks) are skipped.
static int transact(struct msg *m, uint32_t first, uint32_t last, uint64_t *handle) {
  if (send(sock, m->buf, m->len, 0) != (ssize_t)m->len) return -errno;
  uint32_t acked = 0, want = last - first + 1;
  static char in[65536];
  while (acked < want) {
    struct pollfd p = {.fd = sock, .events = POLLIN};
    int ready = poll(&p, 1, ANSWER_TIMEOUT_MS);
    if (ready == 0) return -ETIMEDOUT;
    if (ready < 0) {
      if (errno == EINTR) continue;
      return -errno;
    }
    ssize_t n = recv(sock, in, sizeof in, 0);
    if (n < 0) return -errno;
    for (struct nlmsghdr *h = (struct nlmsghdr *)in; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq < first - 1 || h->nlmsg_seq > last + 1) continue;
      if (h->nlmsg_type == NLMSG_ERROR) {
        int err = ((struct nlmsgerr *)NLMSG_DATA(h))->error;
        if (err != 0) return err;
        if (h->nlmsg_seq >= first && h->nlmsg_seq <= last) acked++;
      } else if (h->nlmsg_type == ((NFNL_SUBSYS_NFTABLES << 8) | NFT_MSG_NEWRULE) && handle) {
        struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
        int left = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(struct nfgenmsg)));
        for (; left >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= left;
             left -= NLA_ALIGN(a->nla_len), a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len))) {
          if ((a->nla_type & NLA_TYPE_MASK) != NFTA_RULE_HANDLE || a->nla_len != NLA_HDRLEN + 8) continue;
          uint64_t be;
          memcpy(&be, (char *)a + NLA_HDRLEN, 8);
          *handle = ((uint64_t)ntohl((uint32_t)be) << 32) | ntohl((uint32_t)(be >> 32));
        }
      }
    }
  }
  return 0;
}

// One transaction: BATCH_BEGIN, the messages `build` adds (each with NLM_F_ACK), BATCH_END.
static int batch(void (*build)(struct msg *, const void *), const void *arg, uint64_t *handle) {
  static struct msg m;
  memset(&m, 0, sizeof m);
  begin(&m, NFNL_MSG_BATCH_BEGIN, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  end(&m);
  uint32_t first = next_seq;
  build(&m, arg);
  uint32_t last = next_seq - 1;
  begin(&m, NFNL_MSG_BATCH_END, 0, AF_UNSPEC, NFNL_SUBSYS_NFTABLES);
  end(&m);
  return transact(&m, first, last, handle);
}

#define NFT(type) ((NFNL_SUBSYS_NFTABLES << 8) | (type))

// ---- the requests ----

static char table[NFT_TABLE_MAXNAMELEN];

struct redirect {
  uint16_t port, to;
  // Which packets the rule takes: NFPROTO_UNSPEC both families, else only those of NFPROTO_IPV4 or NFPROTO_IPV6.
  uint8_t family;
  // With skip, packets from `source` (of `family`) are left alone.
  int skip;
  unsigned char source[16];
};

// A rule of one of the table's chains, by handle (delete, unguard).
struct rule_ref {
  const char *chain;
  uint64_t handle;
};

static void base_chain(struct msg *m, const char *name, uint32_t hook, int32_t priority, const char *type) {
  begin(m, NFT(NFT_MSG_NEWCHAIN), NLM_F_CREATE | NLM_F_ACK, FAMILY, 0);
  attr_str(m, NFTA_CHAIN_TABLE, table);
  attr_str(m, NFTA_CHAIN_NAME, name);
  nest(m, NFTA_CHAIN_HOOK);
  attr_u32(m, NFTA_HOOK_HOOKNUM, hook);
  attr_u32(m, NFTA_HOOK_PRIORITY, (uint32_t)priority);
  unnest(m);
  attr_u32(m, NFTA_CHAIN_POLICY, NF_ACCEPT);
  attr_str(m, NFTA_CHAIN_TYPE, type);
  end(m);
}

// `tcp dport PORT`: the meta l4proto dependency nft adds, then the port.
static void tcp_dport(struct msg *m, uint16_t host_port) {
  expr(m, "meta");
  attr_u32(m, NFTA_META_DREG, NFT_REG_1);
  attr_u32(m, NFTA_META_KEY, NFT_META_L4PROTO);
  expr_end(m);
  uint8_t tcp = IPPROTO_TCP;
  cmp(m, NFT_CMP_EQ, &tcp, 1);
  payload(m, NFT_PAYLOAD_TRANSPORT_HEADER, 2, 2);
  uint16_t port = htons(host_port);
  cmp(m, NFT_CMP_EQ, &port, 2);
}

static void comment(struct msg *m, const char *text) {
  char data[2 + 32];
  int len = snprintf(data + 2, sizeof data - 2, "%s", text) + 1;
  data[0] = UDATA_RULE_COMMENT;
  data[1] = (char)len;
  attr(m, NFTA_RULE_USERDATA, data, 2 + (size_t)len);
}

static void build_table(struct msg *m, const void *unused) {
  (void)unused;
  begin(m, NFT(NFT_MSG_NEWTABLE), NLM_F_CREATE | NLM_F_ACK, FAMILY, 0);
  attr_str(m, NFTA_TABLE_NAME, table);
  attr_u32(m, NFTA_TABLE_FLAGS, NFT_TABLE_F_OWNER);
  end(m);
  base_chain(m, CHAIN, NF_INET_PRE_ROUTING, PRIORITY, "nat");
  base_chain(m, GUARD_CHAIN, NF_INET_LOCAL_IN, GUARD_PRIORITY, "filter");
}

static void build_redirect(struct msg *m, const void *arg) {
  const struct redirect *r = arg;
  begin(m, NFT(NFT_MSG_NEWRULE), NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK | NLM_F_ECHO, FAMILY, 0);
  attr_str(m, NFTA_RULE_TABLE, table);
  attr_str(m, NFTA_RULE_CHAIN, CHAIN);
  nest(m, NFTA_RULE_EXPRESSIONS);
  if (r->family != NFPROTO_UNSPEC) { // meta nfproto ipv4|ipv6: the dependency nft adds before ip/ip6 saddr
    expr(m, "meta");
    attr_u32(m, NFTA_META_DREG, NFT_REG_1);
    attr_u32(m, NFTA_META_KEY, NFT_META_NFPROTO);
    expr_end(m);
    cmp(m, NFT_CMP_EQ, &r->family, 1);
  }
  if (r->skip && r->family == NFPROTO_IPV4) {
    payload(m, NFT_PAYLOAD_NETWORK_HEADER, 12, 4); // ip saddr
    cmp(m, NFT_CMP_NEQ, r->source, 4);
  } else if (r->skip) {
    payload(m, NFT_PAYLOAD_NETWORK_HEADER, 8, 16); // ip6 saddr
    cmp(m, NFT_CMP_NEQ, r->source, 16);
  }
  tcp_dport(m, r->port);
  uint16_t to = htons(r->to);
  expr(m, "immediate"); // redirect to :TO
  attr_u32(m, NFTA_IMMEDIATE_DREG, NFT_REG_1);
  nest(m, NFTA_IMMEDIATE_DATA);
  attr(m, NFTA_DATA_VALUE, &to, 2);
  unnest(m);
  expr_end(m);
  expr(m, "redir");
  attr_u32(m, NFTA_REDIR_REG_PROTO_MIN, NFT_REG_1);
  expr_end(m);
  unnest(m);
  char text[32];
  snprintf(text, sizeof text, "devop %u", r->port);
  comment(m, text);
  end(m);
}

// The guard of listener port TO: a connection to it whose conntrack entry no redirect rule made (a client of the pod
// network, or a process of the pod, that connects to the listener's port itself) is reset.
static void build_guard(struct msg *m, const void *arg) {
  uint16_t to = *(const uint16_t *)arg;
  begin(m, NFT(NFT_MSG_NEWRULE), NLM_F_CREATE | NLM_F_APPEND | NLM_F_ACK | NLM_F_ECHO, FAMILY, 0);
  attr_str(m, NFTA_RULE_TABLE, table);
  attr_str(m, NFTA_RULE_CHAIN, GUARD_CHAIN);
  nest(m, NFTA_RULE_EXPRESSIONS);
  tcp_dport(m, to);
  expr(m, "ct"); // ct status (host byte order), & dnat, == 0
  attr_u32(m, NFTA_CT_DREG, NFT_REG_1);
  attr_u32(m, NFTA_CT_KEY, NFT_CT_STATUS);
  expr_end(m);
  uint32_t mask = STATUS_DST_NAT, zero = 0;
  expr(m, "bitwise");
  attr_u32(m, NFTA_BITWISE_SREG, NFT_REG_1);
  attr_u32(m, NFTA_BITWISE_DREG, NFT_REG_1);
  attr_u32(m, NFTA_BITWISE_LEN, sizeof mask);
  nest(m, NFTA_BITWISE_MASK);
  attr(m, NFTA_DATA_VALUE, &mask, sizeof mask);
  unnest(m);
  nest(m, NFTA_BITWISE_XOR);
  attr(m, NFTA_DATA_VALUE, &zero, sizeof zero);
  unnest(m);
  expr_end(m);
  cmp(m, NFT_CMP_EQ, &zero, sizeof zero);
  expr(m, "reject");
  attr_u32(m, NFTA_REJECT_TYPE, NFT_REJECT_TCP_RST);
  uint8_t code = 0;
  attr(m, NFTA_REJECT_ICMP_CODE, &code, 1);
  expr_end(m);
  unnest(m);
  char text[32];
  snprintf(text, sizeof text, "devop listener %u", to);
  comment(m, text);
  end(m);
}

static void build_delete(struct msg *m, const void *arg) {
  const struct rule_ref *r = arg;
  begin(m, NFT(NFT_MSG_DELRULE), NLM_F_ACK, FAMILY, 0);
  attr_str(m, NFTA_RULE_TABLE, table);
  attr_str(m, NFTA_RULE_CHAIN, r->chain);
  attr_u64(m, NFTA_RULE_HANDLE, r->handle);
  end(m);
}

/** Deletes every rule of the redirect chain (a DELRULE naming no handle), keeping the chain and so the nat hook. */
static void build_flush(struct msg *m, const void *unused) {
  (void)unused;
  begin(m, NFT(NFT_MSG_DELRULE), NLM_F_ACK, FAMILY, 0);
  attr_str(m, NFTA_RULE_TABLE, table);
  attr_str(m, NFTA_RULE_CHAIN, CHAIN);
  end(m);
}

static void build_drop(struct msg *m, const void *unused) {
  (void)unused;
  begin(m, NFT(NFT_MSG_DELTABLE), NLM_F_ACK, FAMILY, 0);
  attr_str(m, NFTA_TABLE_NAME, table);
  end(m);
}

// Whether the kernel kept the owner flag (one that predates it, < 5.12, refuses the flag; this makes sure).
static int owned(void) {
  static struct msg m;
  memset(&m, 0, sizeof m);
  uint32_t seq = begin(&m, NFT(NFT_MSG_GETTABLE), NLM_F_ACK, FAMILY, 0);
  attr_str(&m, NFTA_TABLE_NAME, table);
  end(&m);
  if (send(sock, m.buf, m.len, 0) != (ssize_t)m.len) return -errno;
  static char in[8192];
  struct pollfd p = {.fd = sock, .events = POLLIN};
  for (;;) {
    if (poll(&p, 1, ANSWER_TIMEOUT_MS) <= 0) return -ETIMEDOUT;
    ssize_t n = recv(sock, in, sizeof in, 0);
    if (n < 0) return -errno;
    for (struct nlmsghdr *h = (struct nlmsghdr *)in; NLMSG_OK(h, (size_t)n); h = NLMSG_NEXT(h, n)) {
      if (h->nlmsg_seq != seq) continue;
      if (h->nlmsg_type == NLMSG_ERROR) return ((struct nlmsgerr *)NLMSG_DATA(h))->error ?: -ENOENT;
      struct nlattr *a = (struct nlattr *)((char *)NLMSG_DATA(h) + NLMSG_ALIGN(sizeof(struct nfgenmsg)));
      int left = (int)(h->nlmsg_len - NLMSG_LENGTH(sizeof(struct nfgenmsg)));
      for (; left >= NLA_HDRLEN && a->nla_len >= NLA_HDRLEN && a->nla_len <= left;
           left -= NLA_ALIGN(a->nla_len), a = (struct nlattr *)((char *)a + NLA_ALIGN(a->nla_len))) {
        if ((a->nla_type & NLA_TYPE_MASK) != NFTA_TABLE_FLAGS) continue;
        uint32_t flags;
        memcpy(&flags, (char *)a + NLA_HDRLEN, 4);
        return (ntohl(flags) & NFT_TABLE_F_OWNER) ? 0 : -EOPNOTSUPP;
      }
      return -EOPNOTSUPP;
    }
  }
}

// ---- the request loop ----

static void answer(int err, const char *what) {
  if (err == 0)
    printf("ok\n");
  else if (err == -EPERM)
    printf("error %s: %s (needs CAP_NET_ADMIN; only this process may change its table)\n", what, strerror(-err));
  else if (err == -EOPNOTSUPP)
    printf("error %s: %s (owned tables need Linux 5.12 or later)\n", what, strerror(-err));
  else
    printf("error %s: %s\n", what, strerror(-err));
}

static int parse_port(const char *s, uint16_t *out) {
  char *end;
  long v = s ? strtol(s, &end, 10) : 0;
  if (!s || *end || v < 1 || v > 65535) return -1;
  *out = (uint16_t)v;
  return 0;
}

// `add`: one rule for both families; with a source to skip, that family's rule skips it and a second rule takes the
// other family whole. Answers `ok H` or `ok H1,H2`.
static void add_redirect(struct redirect *r) {
  uint64_t first = 0, second = 0;
  int err = batch(build_redirect, r, &first);
  if (err == 0 && first != 0 && r->skip) {
    struct redirect other = {.port = r->port, .to = r->to};
    other.family = r->family == NFPROTO_IPV4 ? NFPROTO_IPV6 : NFPROTO_IPV4;
    err = batch(build_redirect, &other, &second);
    if (err != 0 || second == 0) {
      struct rule_ref undo = {.chain = CHAIN, .handle = first};
      batch(build_delete, &undo, NULL);
    }
  }
  if (err != 0) answer(err, "add rule");
  else if (first == 0 || (r->skip && second == 0)) printf("error the kernel did not echo the rule's handle\n");
  else if (r->skip) printf("ok %llu,%llu\n", (unsigned long long)first, (unsigned long long)second);
  else printf("ok %llu\n", (unsigned long long)first);
}

int main(void) {
  // Ends with the agent however the agent ends (its end of stdin may be closed already: then fgets sees EOF): the
  // parent-death signal interrupts the request loop, then the followers are waited for.
  struct sigaction parent_gone = {.sa_handler = on_parent_gone};
  if (sigaction(SIGTERM, &parent_gone, NULL) != 0 || prctl(PR_SET_PDEATHSIG, SIGTERM) != 0) return 1;
  sock = socket(AF_NETLINK, SOCK_RAW | SOCK_CLOEXEC, NETLINK_NETFILTER);
  struct sockaddr_nl local = {.nl_family = AF_NETLINK};
  if (sock < 0 || bind(sock, (struct sockaddr *)&local, sizeof local) != 0) {
    printf("error netlink socket: %s\n", strerror(errno));
    return 1;
  }
  setvbuf(stdout, NULL, _IOLBF, 0);

  char line[256];
  while (fgets(line, sizeof line, stdin)) {
    if (!strchr(line, '\n') && !feof(stdin)) { // one answer per request, however long: skip the rest of this one
      for (int c = 0; c != '\n' && c != EOF;) c = getchar();
      printf("error request longer than %zu bytes\n", sizeof line - 2);
      continue;
    }
    line[strcspn(line, "\n")] = 0;
    char *words[5] = {0};
    int count = 0;
    for (char *w = strtok(line, " "); w && count < 5; w = strtok(NULL, " ")) words[count++] = w;
    const char *cmd = count ? words[0] : "";
    int known = (!strcmp(cmd, "table") && count == 2) || (!strcmp(cmd, "add") && (count == 3 || count == 4)) ||
                (!strcmp(cmd, "delete") && count == 2) || (!strcmp(cmd, "drop") && count == 1) ||
                (!strcmp(cmd, "guard") && count == 2) || (!strcmp(cmd, "unguard") && count == 2) ||
                (!strcmp(cmd, "outlive") && count == 2);
    if (!known) {
      printf("error unknown request (table NAME | add PORT TO [SKIP_SOURCE] | delete HANDLE | guard TO | unguard "
             "HANDLE | drop | outlive PID)\n");
    } else if (!strcmp(cmd, "outlive")) {
      char *end;
      long pid = strtol(words[1], &end, 10);
      if (*end || pid <= 1) {
        printf("error not a process id: %s\n", words[1]);
        continue;
      }
      if (follower_count == MAX_FOLLOWERS) {
        printf("error at most %d processes to outlive\n", MAX_FOLLOWERS);
        continue;
      }
      int fd = (int)syscall(SYS_pidfd_open, (pid_t)pid, 0);
      if (fd < 0) {
        answer(-errno, "pidfd_open");
        continue;
      }
      followers[follower_count++] = fd;
      printf("ok\n");
    } else if (!strcmp(cmd, "table")) {
      if (table[0]) {
        printf("error this process owns table %s already\n", table);
        continue;
      }
      if (strlen(words[1]) >= sizeof table || strspn(words[1], "abcdefghijklmnopqrstuvwxyz0123456789_") !=
                                                 strlen(words[1])) {
        printf("error table name must be 1-%zu of [a-z0-9_]\n", sizeof table - 1);
        continue;
      }
      strcpy(table, words[1]);
      int err = batch(build_table, NULL, NULL);
      if (err == 0 && (err = owned()) != 0) batch(build_drop, NULL, NULL); // a table without the flag would outlive us
      if (err != 0) table[0] = 0;
      answer(err, "create table");
    } else if (!table[0]) {
      printf("error no table yet (send: table NAME)\n");
    } else if (!strcmp(cmd, "add")) {
      struct redirect r = {0};
      if (parse_port(words[1], &r.port) || parse_port(words[2], &r.to)) {
        printf("error ports must be 1-65535\n");
        continue;
      }
      r.skip = count == 4;
      r.family = !r.skip                                         ? NFPROTO_UNSPEC
                 : inet_pton(AF_INET, words[3], r.source) == 1  ? NFPROTO_IPV4
                 : inet_pton(AF_INET6, words[3], r.source) == 1 ? NFPROTO_IPV6
                                                                : 0xff;
      if (r.family == 0xff) {
        printf("error not an IP address: %s\n", words[3]);
        continue;
      }
      add_redirect(&r);
    } else if (!strcmp(cmd, "guard")) {
      uint16_t to;
      if (parse_port(words[1], &to)) {
        printf("error ports must be 1-65535\n");
        continue;
      }
      uint64_t handle = 0;
      int err = batch(build_guard, &to, &handle);
      if (err == 0 && handle == 0) printf("error the kernel did not echo the rule's handle\n");
      else if (err == 0) printf("ok %llu\n", (unsigned long long)handle);
      else answer(err, "add guard");
    } else if (!strcmp(cmd, "delete") || !strcmp(cmd, "unguard")) {
      // A redirect with a skipped source is two rules (one per family): `add` answered both handles, `H1,H2`.
      struct rule_ref rule = {.chain = !strcmp(cmd, "delete") ? CHAIN : GUARD_CHAIN};
      int err = 0, bad = 0;
      for (char *h = words[1], *end; !bad && *h; h = *end ? end + 1 : end) {
        rule.handle = strtoull(h, &end, 10);
        bad = rule.handle == 0 || (*end && *end != ',') || (*end && !strcmp(cmd, "unguard"));
        if (!bad && err == 0) err = batch(build_delete, &rule, NULL);
      }
      if (bad) printf("error not a rule handle: %s\n", words[1]);
      else answer(err, !strcmp(cmd, "delete") ? "delete rule" : "delete guard");
    } else {
      int err = batch(build_drop, NULL, NULL);
      if (err == 0) table[0] = 0;
      answer(err, "delete table");
    }
  }
  // The agent is gone: its redirects go at once (new connections reach the app, none meets a closed listener), the
  // table with its nat chain stays while the followers' connections end.
  if (table[0] && follower_count > 0) batch(build_flush, NULL, NULL);
  outlive_followers();
  return 0; // the socket closes with the process: the kernel drops the table
}
