// devop-capture: the packet capture behind mirroring (agent/incoming/capture.ts). It copies the TCP packets (IPv4 and
// IPv6) that arrive at one port of the pod's netns from outside, and writes them to stdout as a pcap stream (link type
// RAW: each record is an IP packet), which the agent reassembles into the clients' bytes.
//
//   devop-capture PORT BUFFER_KIB [SKIP_SOURCE]
//
// It replaces tcpdump and the shell that watched it: one small process that needs only CAP_NET_RAW, never changes its
// credentials (so the parent-death signal holds: it goes when the agent goes, kill -9 included), and ends when its
// stdin (a pipe from the agent) closes. stderr: "listening on …" once the filter is in place; the counts at the end.
//
// The filter runs in the kernel (classic BPF): inbound only, not lo, TCP over IPv4 (unfragmented) or over IPv6 (no
// extension headers: TCP is the next header), destination PORT, source not SKIP_SOURCE (an IPv4 or IPv6 address: the
// node, kubelet's probes). Packets wait in the socket's receive buffer (BUFFER_KIB, kernel memory charged to the
// pod) and are read in batches on a timer, not one wake-up per packet: the capture takes next to no CPU from the pod at
// the moment it answers. When the buffer overflows the kernel drops captured packets, never the pod's.
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <linux/filter.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <poll.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define SNAPLEN 65535
#define LINKTYPE_RAW 101
// Read the receive buffer this often while packets come (tcpdump, without --immediate-mode, waits up to 1 s per
// block): a copy reaches the agent at most this late, and the capture wakes at most 1000/BATCH_MS times a second.
#define BATCH_MS 100
#define OUT_BUFFER (256 * 1024)

static unsigned char out[OUT_BUFFER];
static size_t out_len;
static unsigned char packet[SNAPLEN];

static void die(const char *what) {
  fprintf(stderr, "devop-capture: %s: %s\n", what, strerror(errno));
  exit(1);
}

static void usage(const char *why) {
  fprintf(stderr, "devop-capture: %s (usage: devop-capture PORT BUFFER_KIB [SKIP_SOURCE])\n", why);
  exit(2);
}

// Writes everything or ends the capture: the agent closed its end (or died), so nobody reads the copies any more.
static void flush_out(void) {
  size_t at = 0;
  while (at < out_len) {
    ssize_t n = write(STDOUT_FILENO, out + at, out_len - at);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) exit(0);
    at += (size_t)n;
  }
  out_len = 0;
}

static void put(const void *p, size_t n) {
  if (out_len + n > sizeof out) flush_out();
  memcpy(out + out_len, p, n);
  out_len += n;
}

static void put_u32(uint32_t v) { put(&v, 4); }

static void report(int fd, unsigned long long captured) {
  struct tpacket_stats stats = {0};
  socklen_t len = sizeof stats;
  // PACKET_STATISTICS counts since the last call; one call, at the end.
  if (getsockopt(fd, SOL_PACKET, PACKET_STATISTICS, &stats, &len) == 0)
    fprintf(stderr, "%llu packets captured, %u dropped by kernel\n", captured, stats.tp_drops);
  else
    fprintf(stderr, "%llu packets captured\n", captured);
}

int main(int argc, char **argv) {
  if (argc < 3 || argc > 4) usage("wrong number of arguments");
  char *end;
  long port = strtol(argv[1], &end, 10);
  if (*end || port < 1 || port > 65535) usage("PORT must be 1-65535");
  long kib = strtol(argv[2], &end, 10);
  if (*end || kib < 64 || kib > 1024 * 1024) usage("BUFFER_KIB must be 64-1048576");
  // The source not to capture, in its family; the other family's is the unspecified address (0.0.0.0, ::), which no
  // captured TCP packet comes from.
  struct in_addr skip = {0};
  struct in6_addr skip6 = IN6ADDR_ANY_INIT;
  if (argc == 4 && inet_pton(AF_INET, argv[3], &skip) != 1 && inet_pton(AF_INET6, argv[3], &skip6) != 1)
    usage("SKIP_SOURCE must be an IPv4 or IPv6 address");
  uint32_t s6[4];
  memcpy(s6, &skip6, sizeof s6);

  // Killed with the agent however it ends. (Had the agent died before this line, its end of stdin is closed already,
  // and the loop below ends at once.)
  if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0) die("prctl(PR_SET_PDEATHSIG)");
  signal(SIGPIPE, SIG_IGN);

  // Protocol 0: the socket receives nothing until bind(), so no packet gets in before the filter is attached.
  int fd = socket(AF_PACKET, SOCK_DGRAM, 0);
  if (fd < 0) die(errno == EPERM ? "socket(AF_PACKET) needs CAP_NET_RAW" : "socket(AF_PACKET)");

  // Jump offsets count from the next instruction: TO(i, label) from instruction i. The packet socket is of
  // SOCK_DGRAM, so offsets start at the IP header.
  enum { V4 = 6, V6 = 15, PORT6 = 26, ACCEPT = 28, DROP = 29 };
#define TO(i, label) ((label) - (i) - 1)
  struct sock_filter code[] = {
      /* 0 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_PKTTYPE),
      /* 1 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PACKET_OUTGOING, TO(1, DROP), 0),
      /* 2 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_IFINDEX),
      /* 3 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, 1, TO(3, DROP), 0),  // lo: what the pod sends itself
      /* 4 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, SKF_AD_OFF + SKF_AD_PROTOCOL),  // the ethertype
      /* 5 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IP, TO(5, V4), TO(5, V6)),
      // IPv4: TCP, not a later fragment, not from the skipped source, to PORT
      /* 6 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 9),
      /* 7 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, TO(7, DROP)),
      /* 8 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 6),  // flags and fragment offset
      /* 9 */ BPF_JUMP(BPF_JMP | BPF_JSET | BPF_K, 0x1fff, TO(9, DROP), 0),
      /* 10 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 12),
      /* 11 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ntohl(skip.s_addr), TO(11, DROP), 0),
      /* 12 */ BPF_STMT(BPF_LDX | BPF_B | BPF_MSH, 0),  // X = IPv4 header length
      /* 13 */ BPF_STMT(BPF_LD | BPF_H | BPF_IND, 2),   // TCP destination port
      /* 14 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)port, TO(14, ACCEPT), TO(14, DROP)),
      // IPv6: TCP right after the fixed header, not from the skipped source (all four words equal), to PORT
      /* 15 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ETH_P_IPV6, 0, TO(15, DROP)),
      /* 16 */ BPF_STMT(BPF_LD | BPF_B | BPF_ABS, 6),
      /* 17 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, IPPROTO_TCP, 0, TO(17, DROP)),
      /* 18 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 8),
      /* 19 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ntohl(s6[0]), 0, TO(19, PORT6)),
      /* 20 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 12),
      /* 21 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ntohl(s6[1]), 0, TO(21, PORT6)),
      /* 22 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 16),
      /* 23 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ntohl(s6[2]), 0, TO(23, PORT6)),
      /* 24 */ BPF_STMT(BPF_LD | BPF_W | BPF_ABS, 20),
      /* 25 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, ntohl(s6[3]), TO(25, DROP), TO(25, PORT6)),
      /* 26 */ BPF_STMT(BPF_LD | BPF_H | BPF_ABS, 40 + 2),  // TCP destination port
      /* 27 */ BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)port, TO(27, ACCEPT), TO(27, DROP)),
      /* 28 */ BPF_STMT(BPF_RET | BPF_K, SNAPLEN),
      /* 29 */ BPF_STMT(BPF_RET | BPF_K, 0),
  };
#undef TO
  struct sock_fprog prog = {.len = sizeof code / sizeof code[0], .filter = code};
  if (setsockopt(fd, SOL_SOCKET, SO_ATTACH_FILTER, &prog, sizeof prog) != 0) die("SO_ATTACH_FILTER");

  // SO_RCVBUFFORCE passes net.core.rmem_max (it needs CAP_NET_ADMIN, which the agent has when it may steal); without
  // it the kernel caps the size at rmem_max.
  int bytes = (int)(kib * 1024);
  if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &bytes, sizeof bytes) != 0 &&
      setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &bytes, sizeof bytes) != 0)
    die("SO_RCVBUF");
  int granted = 0;
  socklen_t granted_len = sizeof granted;
  getsockopt(fd, SOL_SOCKET, SO_RCVBUF, &granted, &granted_len);

  struct sockaddr_ll any = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = 0};
  if (bind(fd, (struct sockaddr *)&any, sizeof any) != 0) die("bind");

  // The pcap global header: native byte order (the magic says which), version 2.4, micro-second stamps.
  put_u32(0xa1b2c3d4);
  uint16_t version[2] = {2, 4};
  put(version, sizeof version);
  put_u32(0);
  put_u32(0);
  put_u32(SNAPLEN);
  put_u32(LINKTYPE_RAW);
  flush_out();
  fprintf(stderr, "listening on any, TCP (IPv4, IPv6) to port %ld, buffer %d KiB\n", port, granted / 1024);

  unsigned long long captured = 0;
  struct pollfd fds[2] = {{.fd = fd, .events = POLLIN}, {.fd = STDIN_FILENO, .events = POLLIN}};
  for (;;) {
    // Idle: sleep until a packet (or the agent's end of stdin) comes. Busy: the batch timer paces the reads.
    if (poll(fds, 2, -1) < 0 && errno != EINTR) die("poll");
    if (fds[1].revents) {
      char c;
      if (read(STDIN_FILENO, &c, 1) <= 0) break;
    }
    size_t batch = 0;
    for (;;) {
      ssize_t n = recv(fd, packet, sizeof packet, MSG_DONTWAIT | MSG_TRUNC);
      if (n < 0) {
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) break;
        die("recv");
      }
      struct timeval now;
      gettimeofday(&now, NULL);
      uint32_t caplen = (size_t)n > sizeof packet ? sizeof packet : (uint32_t)n;
      uint32_t record[4] = {(uint32_t)now.tv_sec, (uint32_t)now.tv_usec, caplen, (uint32_t)n};
      put(record, sizeof record);
      put(packet, caplen);
      captured++;
      batch += caplen;
    }
    flush_out();
    // A read that took a quarter of the buffer or more: packets come fast, read again at once so none is dropped.
    if (batch * 4 < (size_t)granted) {
      struct timespec pause = {.tv_sec = 0, .tv_nsec = BATCH_MS * 1000000L};
      while (nanosleep(&pause, &pause) != 0 && errno == EINTR) {
      }
    }
  }
  report(fd, captured);
  return 0;
}
