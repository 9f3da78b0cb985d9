/*
 * What every part of bsz-delayline shares: the system headers, the limits, the state of a direction, of
 * the line and of the pacer, the process-wide flags and the clock.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#ifndef BSZ_DELAYLINE_COMMON_H
#define BSZ_DELAYLINE_COMMON_H
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <fcntl.h>
#include <linux/if_ether.h>
#include <linux/if_packet.h>
#include <math.h>
#include <net/ethernet.h>
#include <net/if.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#ifndef PACKET_IGNORE_OUTGOING
#define PACKET_IGNORE_OUTGOING 23
#endif

#define FRAME_MAX 2048
#define MAP_SIZE 8192 /* power of two, > 2 x hosts */
#define LATE_BUCKETS 2001 /* lateness histogram: 1 us buckets to 2 ms, last one is "more" */
#define MAX_DELAY_US 3.6e9 /* one hour: far beyond any path, and release times cannot overflow */
#define RX_BATCH 32 /* frames read per recvmmsg() */
#define TX_BATCH 32 /* frames of the delay stage sent per sendmmsg() */

struct slot {
	uint64_t release_ns;
	uint64_t seq;
	uint32_t len;
	uint32_t buf;
};

struct cost {
	uint64_t call_ns, frame_ns;
	uint64_t last_ns; /* when such a call last ended */
};

struct dir {
	const char *name;
	int in_fd, out_fd, out_ifindex;
	int paced;             /* the line's departures: one send() each, each at its own time */
	int key_offset;        /* offset of the IPv4 address in the IPv4 header */
	uint64_t default_ns;
	struct slot *heap;     /* min-heap on (release_ns, seq) */
	uint32_t heap_len, cap;
	uint32_t *free_bufs;   /* stack of free frame buffers */
	uint32_t free_len;
	unsigned char *frames;
	uint64_t seq;
	/* counters */
	uint64_t rx_frames, rx_bytes, tx_frames, tx_bytes;
	uint64_t drop_full, drop_oversize, drop_send, drop_kernel;
	uint64_t max_held, late_max_ns, late_sum_ns;
	uint64_t late_hist[LATE_BUCKETS];
	/* when we read the latest frame, its length, and bytes read (for the pacer) */
	uint64_t last_rx_ns, rx_run_bytes;
	uint32_t last_rx_len;
	/* what reading and sending cost us (ns, moving averages): a call's own cost, and each frame's
	 * on top; how much of either fits before the line's next departure (yield_at_ns) */
	struct cost rx_cost, tx_cost;
	uint64_t min_delay_ns; /* the smallest delay any frame of this direction gets */
	uint64_t yields;       /* batches cut short for a departure */
};

/* The kicker of -k (see the header comment). Times are CLOCK_MONOTONIC ns. */
struct pacer {
	int fd;
	double ns_per_byte;
	uint64_t next_ns;  /* next kick, 0 = none planned: wait for a departure */
	uint64_t until_ns; /* while a kick releases nothing, retry every PROBE_NS until then */
	uint64_t seen_ns;  /* read time of the last departure the schedule accounts for */
	uint64_t kicks, hits, grid_hits, send_errors, late_sum_ns, late_max_ns;
	int last_errno;
};
/* A departure we did not cause (the shaper's timer, or an arrival at an empty queue) is read up
 * to a few tens of us after it left; the next frame is due one frame time after it left, so
 * probe from PROBE_EARLY_NS before that until PROBE_LATE_NS after, every PROBE_NS. A kick that
 * releases a frame fixes the shaper's phase to within PROBE_NS; later kicks follow on a grid. */
/* The line shaper's shared status (-q): the toolkit maps the same page. Only we write the
 * counters (seq is odd while we do); only the toolkit writes want_limit, then want_gen. */
#define LINE_MAGIC 0x31454e494c5a5342ull /* "BSZLINE1" little-endian */
struct line_status {
	uint64_t magic, seq, limit_bytes, backlog_bytes, backlog_frames;
	uint64_t enq_frames, enq_bytes, sent_frames, sent_bytes, drops, clock_resets;
	uint64_t want_gen, want_limit, applied_gen, rate_bps, burst_bytes;
	uint64_t lost_ns; /* schedule time given up after late wake-ups (capacity lost for good) */
};
struct line {
	int on;
	double ns_per_byte;
	uint64_t burst_ns;
	struct slot *ring; /* FIFO of frames read from side A; release_ns holds the arrival time */
	uint32_t head, count, cap;
	uint64_t free_at_ns; /* when the frame being serialized has finished (schedule, not wall) */
	struct line_status *st;
};
#define PROBE_NS 2000ull
#define PROBE_EARLY_NS 30000ull
#define PROBE_LATE_NS 10000ull
#define GRID_SLACK_NS 4000ull
static volatile sig_atomic_t pacing_off;
static void on_usr1(int sig) { (void)sig; pacing_off = !pacing_off; }

struct map_entry {
	uint32_t ip; /* network order, 0 = empty */
	uint64_t fwd_ns, rev_ns;
};

static struct map_entry map[MAP_SIZE];
static struct line line;
/* When the line is on, work that is not one of its departures (reading input, the delay stage's
 * batched sends, the stats file) stops short of the next departure: a batch of 32 frames is tens
 * of us, and at 200 Mb/s 10 % of a frame time is 6 us. Without this, 10 % of the busy gaps were
 * more than 10 % off at 200 Mb/s (bench/results/shaper-scale.md). 0 = no departure pending. */
static uint64_t yield_at_ns;
#define YIELD_GUARD_NS 3000ull  /* margin for the clock reading and the loop back to the send */
#define STATS_COST_NS 100000ull /* writing the stats file: deferred while a departure is this near */
#define COST_START_NS 1000ull   /* the cost estimate before the first measurement */
/* A call longer than these was preempted or interrupted: counted at the cap, so one outlier
 * cannot make every later window look too short (input would then wait for the line to drain). */
#define CALL_CAP_NS 20000ull
#define FRAME_CAP_NS 4000ull
/* Work waits for departures at most this long: at 1 Gb/s a frame time (12 us) leaves little room,
 * and input must still be read as fast as it comes (a full socket drops frames). */
#define MAX_DEFER_NS 50000ull
static volatile sig_atomic_t stop_requested;

static void on_signal(int sig) { (void)sig; stop_requested = 1; }

static uint64_t now_ns(void)
{
	struct timespec ts;
	clock_gettime(CLOCK_MONOTONIC, &ts);
	return (uint64_t)ts.tv_sec * 1000000000ull + (uint64_t)ts.tv_nsec;
}

static void die(const char *what)
{
	fprintf(stderr, "bsz-delayline: %s: %s\n", what, strerror(errno));
	exit(1);
}

/* Every part's functions, so that the parts may come in any order. */
static struct map_entry *map_find(uint32_t ip, int create);
static int parse_delay_us(const char *s, double *out);
static int parse_long(const char *s, long lo, long hi, long *out);
static void map_error(const char *path, int lineno, const char *what);
static void load_map(const char *path);
static int open_side(const char *ifname, int *ifindex);
static uint32_t stripped_vlan(struct msghdr *msg);
static int take_frame(struct dir *d, int forward, struct mmsghdr *m, uint32_t buf, uint64_t t);
static int drain_input(struct dir *d, int forward);
static int slot_less(const struct slot *a, const struct slot *b);
static void heap_push(struct dir *d, struct slot s);
static void heap_pop(struct dir *d);
static void dir_free(struct dir *d);
static void dir_init(struct dir *d, const char *name, uint32_t cap, int key_offset, uint64_t default_ns);
static uint64_t delay_for(const struct dir *d, const unsigned char *frame, uint32_t len, int forward);
static uint64_t release_due(struct dir *d);
static void read_kernel_drops(struct dir *d);
static double late_quantile(const struct dir *d, double q);
static void status_begin(struct line_status *st);
static void status_end(struct line_status *st);
static int line_enqueue(struct dir *d, uint64_t t, uint32_t len, uint32_t buf);
static void line_apply_limit(void);
static uint64_t line_release(struct dir *d);
static void plan_yield(const struct dir *fwd);
static uint32_t batch_budget(const struct cost *c, uint32_t most);
static void ewma(uint64_t *avg, uint64_t x);
static void note_cost(struct cost *c, uint64_t end_ns, uint64_t elapsed_ns, int frames);
static void line_init(const char *status_path, long slots, double rate_bps, long limit, long burst);
static void dir_json(FILE *f, struct dir *d);
static void write_stats(const char *path, struct dir *fwd, struct dir *rev, const struct pacer *p);
static void pacer_observe(struct pacer *p, struct dir *d);
static uint64_t pacer_run(struct pacer *p, struct dir *fwd);

#endif
