// What the bench's C floor (ws-framed-pair.c) uses: errors, big-endian u32s, a listening socket.
#ifndef BENCH_NET_H
#define BENCH_NET_H
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/socket.h>

static void die(const char *what) {
  perror(what);
  exit(1);
}

static void put32(uint8_t *p, uint32_t v) {
  p[0] = v >> 24, p[1] = v >> 16, p[2] = v >> 8, p[3] = v;
}

static uint32_t get32(const uint8_t *p) {
  return (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 | p[3];
}

static int listen_on(uint32_t addr, int port) {
  int one = 1, fd = socket(AF_INET, SOCK_STREAM, 0);
  struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port), .sin_addr.s_addr = htonl(addr)};
  setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  if (bind(fd, (struct sockaddr *)&sa, sizeof sa) < 0 || listen(fd, 1024) < 0) die("listen");
  return fd;
}

/** The next connection on `listener`, with Nagle off (each side writes whole frames), or -1. */
static int accept_nodelay(int listener) {
  int one = 1, fd = accept(listener, NULL, NULL);
  if (fd >= 0) setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
  return fd;
}
#endif
