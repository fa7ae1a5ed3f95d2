// A C model of the ring's shared-memory channel (crates/nuvec-distributed/src/ring/shared.rs):
// two processes ping-pong a message through two one-way channels of 8 slots, and the sender
// copies into each slot with plain stores (mode 0) or with streaming stores that bypass the
// cache (mode 1). Prints the round trip's median and each side's mean time per slot copy,
// which is how the thirteenth collectives run (docs/performance.md) found why the VM's slow state is slow.
//
//   gcc -O2 -mavx2 -o target/channel_stores scripts/bench/channel_stores.c
//   target/channel_stores BYTES ROUNDS SLOT_BYTES MODE     # e.g. 1048576 300 131072 0
//
// Run scripts/bench/cross_core.rs before and after to know the machine's state.
#define _GNU_SOURCE
#include <immintrin.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define SLOTS 8

static size_t slot_bytes;
static int streaming;
static double write_time, read_time;
static long writes, reads;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + t.tv_nsec * 1e-9;
}

struct channel {
  _Alignas(64) atomic_ulong head;
  _Alignas(64) atomic_ulong tail;
  _Alignas(4096) char slots[];
};

static void copy_streaming(char *to, const char *from, size_t n) {
  size_t i = 0;
  for (; i + 64 <= n; i += 64) {
    __m256i a = _mm256_loadu_si256((const __m256i *)(from + i));
    __m256i b = _mm256_loadu_si256((const __m256i *)(from + i + 32));
    _mm256_stream_si256((__m256i *)(to + i), a);
    _mm256_stream_si256((__m256i *)(to + i + 32), b);
  }
  memcpy(to + i, from + i, n - i);
  _mm_sfence();
}

static void send_all(struct channel *c, const char *data, size_t n) {
  for (size_t off = 0; off < n;) {
    unsigned long head = atomic_load_explicit(&c->head, memory_order_relaxed);
    for (int spins = 0; head - atomic_load_explicit(&c->tail, memory_order_acquire) >= SLOTS;)
      if (++spins > 200) sched_yield();
    size_t k = n - off < slot_bytes ? n - off : slot_bytes;
    char *slot = c->slots + (head % SLOTS) * slot_bytes;
    double start = now();
    if (streaming)
      copy_streaming(slot, data + off, k);
    else
      memcpy(slot, data + off, k);
    write_time += now() - start;
    writes++;
    atomic_store_explicit(&c->head, head + 1, memory_order_release);
    off += k;
  }
}

static void recv_all(struct channel *c, char *data, size_t n) {
  for (size_t off = 0; off < n;) {
    unsigned long tail = atomic_load_explicit(&c->tail, memory_order_relaxed);
    for (int spins = 0; atomic_load_explicit(&c->head, memory_order_acquire) == tail;)
      if (++spins > 200) sched_yield();
    size_t k = n - off < slot_bytes ? n - off : slot_bytes;
    double start = now();
    memcpy(data + off, c->slots + (tail % SLOTS) * slot_bytes, k);
    read_time += now() - start;
    reads++;
    atomic_store_explicit(&c->tail, tail + 1, memory_order_release);
    off += k;
  }
}

static int by_value(const void *a, const void *b) {
  double x = *(const double *)a, y = *(const double *)b;
  return x < y ? -1 : x > y;
}

int main(int argc, char **argv) {
  if (argc != 5) {
    fprintf(stderr, "usage: %s BYTES ROUNDS SLOT_BYTES MODE(0 plain, 1 streaming)\n", argv[0]);
    return 2;
  }
  size_t n = strtoul(argv[1], 0, 10);
  int rounds = atoi(argv[2]);
  slot_bytes = strtoul(argv[3], 0, 10);
  streaming = atoi(argv[4]);
  if (n == 0 || rounds <= 0 || slot_bytes == 0 || slot_bytes % 64) {
    fprintf(stderr, "BYTES, ROUNDS and SLOT_BYTES (a multiple of 64) must be positive\n");
    return 2;
  }
  size_t size = sizeof(struct channel) + SLOTS * slot_bytes;
  char *shared = mmap(0, 2 * size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
  if (shared == MAP_FAILED) return perror("mmap"), 1;
  struct channel *there = (void *)shared, *back = (void *)(shared + size);
  char *data = malloc(n);
  if (fork() == 0) {
    memset(data, 2, n);
    for (int i = 0; i < rounds; i++) {
      recv_all(there, data, n);
      send_all(back, data, n);
    }
    exit(0);
  }
  memset(data, 1, n);
  double *times = malloc(sizeof(double) * rounds);
  for (int i = 0; i < rounds; i++) {
    double start = now();
    send_all(there, data, n);
    recv_all(back, data, n);
    times[i] = now() - start;
  }
  wait(0);
  qsort(times, rounds, sizeof(double), by_value);
  printf("mode=%d n=%zu median %.1f us p10 %.1f p90 %.1f  write a slot %.1f us  read a slot %.1f us\n",
         streaming, n, times[rounds / 2] * 1e6, times[rounds / 10] * 1e6,
         times[rounds * 9 / 10] * 1e6, write_time / writes * 1e6, read_time / reads * 1e6);
  return 0;
}
