// clockshim: an LD_PRELOAD library that makes a process's clocks run at
// FAKE_RATE (default 1.0) times real speed, FAKE_OFFSET_MS ahead, from the
// moment it starts. It reads the real clocks with raw syscalls and allocates
// nothing (libfaketime hangs Debian's jemalloc-built redis-server).
#define _GNU_SOURCE
#include <stdlib.h>
#include <sys/syscall.h>
#include <sys/time.h>
#include <time.h>
#include <unistd.h>

#define NCLOCKS 16
static double rate = 1.0;
static long long offset_ns;
static long long base[NCLOCKS];

static long long raw_ns(clockid_t c) {
	struct timespec ts;
	syscall(SYS_clock_gettime, c, &ts);
	return ts.tv_sec * 1000000000LL + ts.tv_nsec;
}

__attribute__((constructor)) static void init(void) {
	const char *r = getenv("FAKE_RATE"), *o = getenv("FAKE_OFFSET_MS");
	if (r) rate = atof(r);
	if (o) offset_ns = atoll(o) * 1000000LL;
	for (int c = 0; c < NCLOCKS; c++) base[c] = raw_ns(c);
}

static long long fake_ns(clockid_t c) {
	long long t = raw_ns(c);
	if (c < 0 || c >= NCLOCKS) return t;
	return base[c] + (long long)((double)(t - base[c]) * rate) + offset_ns;
}

int clock_gettime(clockid_t c, struct timespec *ts) {
	long long t = fake_ns(c);
	ts->tv_sec = t / 1000000000LL;
	ts->tv_nsec = t % 1000000000LL;
	return 0;
}

int gettimeofday(struct timeval *tv, void *tz) {
	(void)tz;
	long long t = fake_ns(CLOCK_REALTIME);
	tv->tv_sec = t / 1000000000LL;
	tv->tv_usec = (t % 1000000000LL) / 1000;
	return 0;
}

time_t time(time_t *out) {
	time_t t = fake_ns(CLOCK_REALTIME) / 1000000000LL;
	if (out) *out = t;
	return t;
}
