// A packet-level delay line for bench/tunnel.ts (this kernel has no sch_netem): two TUN devices, each packet read from
// one is written to the other `delay` ms later, in order, both ways. Routed between two network namespaces, it is a
// path with an RTT of twice the delay on which TCP itself waits a round trip for its ACKs — slow start, window growth
// and the send buffer's limit included — as it does to a cluster. (A relay that holds bytes, as delay-line.ts does,
// ends TCP at the line: the sender's bytes are acknowledged at loopback distance and only the application-level
// window waits a round trip.)
// The devices carry virtio-net headers with TCP segmentation offload, as a VM's tap does: a read returns up to 64 KiB
// of one connection's segments in one packet, and the receiving stack takes it as segments of the path's MSS (1500
// MTU), so TCP's congestion window counts real-sized segments while this process moves few, large packets.
//   delay-tun <delay ms> <device a> <device b>   creates both devices, prints {"ready":true}; ends at EOF on stdin
// Packets that arrive while MAX_HELD bytes wait in one direction are dropped, as a router's full queue drops them.
#define _GNU_SOURCE
#include <fcntl.h>
#include <linux/if.h>
#include <linux/if_tun.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/ioctl.h>
#include <sys/timerfd.h>
#include <time.h>
#include <unistd.h>

/** Largest packet a read returns: a 64 KiB GSO packet and its virtio-net header. */
#define MAX_PACKET (65536 + 64)
/** Bytes held per direction (64 MiB): far above what 1 GiB/s puts in 10 ms; beyond it, packets are dropped. */
#define MAX_HELD (64u << 20)

static void die(const char *what) {
  perror(what);
  exit(1);
}

static uint64_t now_ns(void) {
  struct timespec ts;
  clock_gettime(CLOCK_MONOTONIC, &ts);
  return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/** One held packet in a direction's ring: its header, then `len` bytes; len 0 marks a wrap to the ring's start. */
struct held {
  uint64_t due;
  uint32_t len;
};

/** One direction: packets read from `from` wait in a ring until they are due, then go to `to`, oldest first. */
struct way {
  int from, to;
  uint8_t *ring;
  size_t head, tail, used; // head: oldest packet; tail: where the next one goes; used: bytes between them
  uint64_t dropped;
};

static int open_tun(const char *name) {
  int fd = open("/dev/net/tun", O_RDWR | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) die("/dev/net/tun");
  struct ifreq ifr = {.ifr_flags = IFF_TUN | IFF_NO_PI | IFF_VNET_HDR};
  snprintf(ifr.ifr_name, IFNAMSIZ, "%s", name);
  if (ioctl(fd, TUNSETIFF, &ifr) < 0) die("TUNSETIFF");
  // Checksums and TCP segmentation are left to the receiving stack, as between a VM and its host.
  if (ioctl(fd, TUNSETOFFLOAD, TUN_F_CSUM | TUN_F_TSO4 | TUN_F_TSO6) < 0) die("TUNSETOFFLOAD");
  return fd;
}

/** Room for one more packet at the tail, wrapping to the start when the end is too short; NULL when full. */
static uint8_t *reserve(struct way *w) {
  const size_t need = sizeof(struct held) + MAX_PACKET;
  if (w->used + 2 * need > MAX_HELD) return NULL;
  if (w->tail + need > MAX_HELD) {
    if (w->tail < w->head || (w->used > 0 && w->head < need)) return NULL;
    if (w->tail + sizeof(struct held) <= MAX_HELD) ((struct held *)(w->ring + w->tail))->len = 0;
    w->used += MAX_HELD - w->tail;
    w->tail = 0;
  } else if (w->tail < w->head && w->tail + need > w->head) {
    return NULL;
  }
  return w->ring + w->tail;
}

static void take_in(struct way *w, uint64_t delay_ns) {
  static uint8_t scratch[MAX_PACKET];
  for (;;) {
    uint8_t *slot = reserve(w);
    uint8_t *into = slot ? slot + sizeof(struct held) : scratch;
    ssize_t n = read(w->from, into, MAX_PACKET);
    if (n <= 0) return; // EAGAIN: all read
    if (!slot) {
      w->dropped++;
      continue;
    }
    *(struct held *)slot = (struct held){.due = now_ns() + delay_ns, .len = (uint32_t)n};
    size_t size = (sizeof(struct held) + (size_t)n + 7) & ~(size_t)7;
    w->tail += size;
    w->used += size;
  }
}

/** Sends every packet that is due; returns when the next one is due (0: none held). */
static uint64_t let_out(struct way *w) {
  uint64_t now = now_ns();
  while (w->used > 0) {
    if (w->head + sizeof(struct held) > MAX_HELD || ((struct held *)(w->ring + w->head))->len == 0) {
      w->used -= MAX_HELD - w->head;
      w->head = 0;
      continue;
    }
    struct held *p = (struct held *)(w->ring + w->head);
    if (p->due > now) return p->due;
    // A write the stack refuses is a lost packet, as on a network: TCP retransmits it.
    if (write(w->to, (uint8_t *)(p + 1), p->len) < 0) w->dropped++;
    size_t size = (sizeof(struct held) + p->len + 7) & ~(size_t)7;
    w->head += size;
    w->used -= size;
  }
  w->head = w->tail = 0;
  return 0;
}

int main(int argc, char **argv) {
  if (argc != 4) {
    fprintf(stderr, "usage: delay-tun <delay ms> <device a> <device b>\n");
    return 2;
  }
  uint64_t delay_ns = (uint64_t)(atof(argv[1]) * 1e6);
  int a = open_tun(argv[2]), b = open_tun(argv[3]);
  struct way ways[2] = {{.from = a, .to = b}, {.from = b, .to = a}};
  for (int i = 0; i < 2; i++)
    if (!(ways[i].ring = malloc(MAX_HELD))) die("malloc");
  int timer = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
  int ep = epoll_create1(EPOLL_CLOEXEC);
  if (timer < 0 || ep < 0) die("timerfd/epoll");
  int fds[] = {a, b, timer, STDIN_FILENO};
  for (int i = 0; i < 4; i++) {
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fds[i]};
    if (epoll_ctl(ep, EPOLL_CTL_ADD, fds[i], &ev) < 0) die("epoll_ctl");
  }
  printf("{\"ready\":true}\n");
  fflush(stdout);
  for (;;) {
    struct epoll_event evs[4];
    int n = epoll_wait(ep, evs, 4, -1);
    if (n < 0) continue;
    for (int i = 0; i < n; i++) {
      int fd = evs[i].data.fd;
      if (fd == STDIN_FILENO) {
        char c;
        if (read(STDIN_FILENO, &c, 1) <= 0) {
          fprintf(stderr, "delay-tun: dropped %llu and %llu packets\n", (unsigned long long)ways[0].dropped,
                  (unsigned long long)ways[1].dropped);
          return 0;
        }
      } else if (fd == timer) {
        uint64_t ticks;
        (void)!read(timer, &ticks, sizeof ticks);
      } else {
        take_in(&ways[fd == a ? 0 : 1], delay_ns);
      }
    }
    uint64_t next = 0;
    for (int i = 0; i < 2; i++) {
      uint64_t due = let_out(&ways[i]);
      if (due && (!next || due < next)) next = due;
    }
    struct itimerspec at = {.it_value = {.tv_sec = (time_t)(next / 1000000000u), .tv_nsec = (long)(next % 1000000000u)}};
    if (timerfd_settime(timer, TFD_TIMER_ABSTIME, &at, NULL) < 0) die("timerfd_settime");
  }
}
