/*
 * bsz-delayline: a userspace constant-delay line between two interfaces.
 *
 * Used where the kernel has no sch_netem. It sits on the path after the
 * bottleneck queue (switch -> receiver), reads every frame from one side with
 * an AF_PACKET socket, holds it for the delay of the host it belongs to and
 * writes it to the other side. Side A faces the switch, side B the receiver:
 *   A -> B (data): delay chosen by the IPv4 source address (the sender host)
 *   B -> A (acks): delay chosen by the IPv4 destination address
 * Frames that carry no IPv4 header (ARP) get the default delay of their side. VLAN tags (802.1Q,
 * QinQ) are looked through for the IPv4 header and leave as they came.
 *
 * Per key the delay is constant and frames leave in arrival order, so a flow is
 * never reordered. Frames of hosts with different delays may overtake each
 * other, as they would on separate wires. Nothing is dropped silently: every
 * loss (pool full, oversize frame, send error, kernel socket drops) is counted
 * and written to the stats file.
 *
 * Usage: bsz-delayline -a IFACE -b IFACE [-f US] [-r US] [-m MAPFILE]
 *                      [-n SLOTS] [-s STATSFILE] [-i MS] [-p RTPRIO] [-w US] [-c CPU] [-k FD -R BPS]
 *                      [-L BYTES -R BPS [-B BYTES] -q STATUSFILE]
 *   -f/-r   default delay A->B / B->A in microseconds (all delays: 0 to MAX_DELAY_US)
 *   -m      lines "a.b.c.d fwd_us rev_us": per-host delays ('#' starts a comment); a map that
 *           cannot be read exactly as written is refused (exit 2)
 *   -n      frames held at most per direction (default 65536)
 *   -s      stats file, rewritten atomically every -i ms (default 200) and at exit
 *   -p      SCHED_FIFO priority (0 = normal scheduling, the default)
 *   -w      spin instead of sleeping when the next release is this close (us, default 0)
 *   -c      run on this CPU only (default: any)
 *   -k FD   pace the bottleneck: FD is an inherited AF_PACKET socket bound to the bottleneck
 *           port (in the switch's namespace) whose frames the qdisc steals (tc cBPF filter,
 *           TC_ACT_STOLEN) without queueing them; -R gives the bottleneck rate in bit/s
 *   -R      bottleneck rate (bit/s) for -k or -L
 *   -L      be the bottleneck (the "line" shaper): A->B frames wait in a drop-tail FIFO of this
 *           many bytes (bfifo's rule: a frame is queued if backlog + its length <= limit) and
 *           leave at -R, each when the previous one has been serialized
 *   -B      how far (bytes of the rate) the line may fall behind its schedule and catch up
 *           back to back after a late wake-up (default 2 frames); further behind, the time is lost
 *   -q      the line's status file: a page of u64 counters (struct line_status) rewritten on
 *           every enqueue and departure under a sequence lock, and the buffer limit, which the
 *           toolkit changes in place by writing want_limit and then want_gen
 * Pacing (-k): the kernel's shaper releases a frame when its qdisc watchdog (an hrtimer) fires,
 * and on this VM that interrupt plus the NET_TX softirq behind it come 10-50 us late with as
 * much jitter (bench/results/pacing.md). Any enqueue on the port also runs the qdisc, so we
 * send a "kick" frame when the shaper's next frame is due: the shaper (still the only rate
 * limit and the only queue) releases it inside our send(), and the frame reaches side A before
 * send() returns, which tells us the kick hit. Kicks then follow on a grid of frame times. A
 * departure we did not cause (timer, arrival at an empty queue) is only seen when we read it,
 * so after one we probe every few us around its frame time until a kick hits again; a kick
 * that releases nothing (queue empty) waits for the next departure. (Kernel receive timestamps
 * cannot date departures: forwarded TCP frames keep the sender's EDT time in skb->tstamp.)
 * SIGUSR1 toggles pacing (for A/B benchmarks).
 * The line (-L) exists because even the pacer leaves 5-10 % of gaps >10 % off at 62.5 Mb/s on
 * this VM: the kernel's shaper still runs in softirq behind other work. Here the departure is
 * our own send() at a time we chose, a few us late at most while we spin. Input is read in
 * batches (recvmmsg) so that reading costs the pacing thread less; each departure is still a
 * send() of its own at its own time (frames of the delay stage due together share a sendmmsg).
 * Everything else the thread does (reading, the acks' batched sends, the stats file) is cut to
 * what fits before the next departure, from the measured cost per frame of each (yield_at_ns):
 * at 200 Mb/s this took the busy gaps >10 % off from 10 % to about 2 % (bench/results/shaper-scale.md).
 * Stats also give how late frames left against their release time (mean, p50, p99, max): the
 * jitter the delay line adds on top of its constant delay.
 * SIGTERM/SIGINT: write final stats and exit 0.
 */
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

static uint32_t map_hash(uint32_t ip) { return (ip * 2654435761u) & (MAP_SIZE - 1); }

static struct map_entry *map_find(uint32_t ip, int create)
{
	/* 0 marks an empty slot: 0.0.0.0 (a DHCP client's source) would "find" one and get 0 delay. */
	if (ip == 0)
		return NULL;
	for (uint32_t i = map_hash(ip), n = 0; n < MAP_SIZE; i = (i + 1) & (MAP_SIZE - 1), n++) {
		if (map[i].ip == ip)
			return &map[i];
		if (map[i].ip == 0)
			return create ? &map[i] : NULL;
	}
	return NULL;
}

/* A delay in us: all of s is a number from 0 to MAX_DELAY_US (a huge, infinite or NaN one made
 * the conversion to integer ns undefined behaviour; "5x" or "-1" were taken or refused unevenly). */
static int parse_delay_us(const char *s, double *out)
{
	char *end;
	errno = 0;
	double v = strtod(s, &end);
	if (end == s || *end || errno == ERANGE || !isfinite(v) || v < 0 || v > MAX_DELAY_US)
		return 0;
	*out = v;
	return 1;
}

/* A whole number from lo to hi, all of s (atoi took "3x" as 3 and garbage as 0). */
static int parse_long(const char *s, long lo, long hi, long *out)
{
	char *end;
	errno = 0;
	long v = strtol(s, &end, 10);
	if (end == s || *end || errno == ERANGE || v < lo || v > hi)
		return 0;
	*out = v;
	return 1;
}

static void map_error(const char *path, int lineno, const char *what)
{
	fprintf(stderr, "bsz-delayline: %s:%d: %s\n", path, lineno, what);
	exit(2);
}

static void load_map(const char *path)
{
	FILE *f = fopen(path, "r");
	char *line = NULL, *field[4], *save;
	size_t cap = 0;
	int lineno = 0, hosts = 0;
	if (!f)
		die(path);
	/* getline: a line of any length is one line (fgets split long ones into bogus entries). */
	ssize_t len;
	while ((len = getline(&line, &cap, f)) != -1) {
		lineno++;
		if (strlen(line) != (size_t)len)
			map_error(path, lineno, "NUL byte in line");
		line[strcspn(line, "#")] = 0; /* a comment runs to the end of the line */
		int n = 0;
		for (char *tok = strtok_r(line, " \t\r\n", &save); tok && n < 4; tok = strtok_r(NULL, " \t\r\n", &save))
			field[n++] = tok;
		if (n == 0)
			continue;
		struct in_addr in;
		double fwd, rev;
		if (n != 3 || inet_pton(AF_INET, field[0], &in) != 1 || in.s_addr == 0)
			map_error(path, lineno, "expected 'a.b.c.d fwd_us rev_us'");
		if (!parse_delay_us(field[1], &fwd) || !parse_delay_us(field[2], &rev))
			map_error(path, lineno, "delays must be numbers from 0 to 3600000000 us");
		struct map_entry *e = map_find(in.s_addr, 1);
		if (e->ip) {
			if (e->fwd_ns != (uint64_t)(fwd * 1000.0) || e->rev_ns != (uint64_t)(rev * 1000.0))
				map_error(path, lineno, "host listed earlier with other delays");
			continue;
		}
		if (++hosts > MAP_SIZE / 2) /* probing stays short while the table is half empty */
			map_error(path, lineno, "too many hosts (at most 4096)");
		e->ip = in.s_addr;
		e->fwd_ns = (uint64_t)(fwd * 1000.0);
		e->rev_ns = (uint64_t)(rev * 1000.0);
	}
	/* fopen succeeds on a directory; only the read fails (EISDIR): not an empty map. */
	if (ferror(f))
		die(path);
	free(line);
	fclose(f);
}

static int open_side(const char *ifname, int *ifindex)
{
	int fd = socket(AF_PACKET, SOCK_RAW, htons(ETH_P_ALL));
	if (fd < 0)
		die("socket(AF_PACKET)");
	*ifindex = (int)if_nametoindex(ifname);
	if (*ifindex == 0) {
		fprintf(stderr, "bsz-delayline: no interface %s\n", ifname);
		exit(2);
	}
	struct sockaddr_ll sll = {.sll_family = AF_PACKET, .sll_protocol = htons(ETH_P_ALL), .sll_ifindex = *ifindex};
	if (bind(fd, (struct sockaddr *)&sll, sizeof sll) < 0)
		die("bind");
	int one = 1, big = 16 << 20;
	/* What we send on this side must not come back to us as input. */
	if (setsockopt(fd, SOL_PACKET, PACKET_IGNORE_OUTGOING, &one, sizeof one) < 0)
		die("PACKET_IGNORE_OUTGOING");
	/* The kernel strips a frame's outer VLAN tag before packet sockets see it; it comes back as
	 * auxdata and is put back before the frame is sent on (else tagged frames left untagged). */
	if (setsockopt(fd, SOL_PACKET, PACKET_AUXDATA, &one, sizeof one) < 0)
		die("PACKET_AUXDATA");
	/* A large receive buffer absorbs bursts while we are busy sending. */
	if (setsockopt(fd, SOL_SOCKET, SO_RCVBUFFORCE, &big, sizeof big) < 0)
		setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &big, sizeof big);
	setsockopt(fd, SOL_SOCKET, SO_SNDBUFFORCE, &big, sizeof big);
	struct packet_mreq mr = {.mr_ifindex = *ifindex, .mr_type = PACKET_MR_PROMISC};
	if (setsockopt(fd, SOL_PACKET, PACKET_ADD_MEMBERSHIP, &mr, sizeof mr) < 0)
		die("PACKET_MR_PROMISC");
	return fd;
}

static int slot_less(const struct slot *a, const struct slot *b)
{
	return a->release_ns < b->release_ns || (a->release_ns == b->release_ns && a->seq < b->seq);
}

static void heap_push(struct dir *d, struct slot s)
{
	uint32_t i = d->heap_len++;
	while (i > 0) {
		uint32_t p = (i - 1) / 2;
		if (!slot_less(&s, &d->heap[p]))
			break;
		d->heap[i] = d->heap[p];
		i = p;
	}
	d->heap[i] = s;
}

static void heap_pop(struct dir *d)
{
	struct slot last = d->heap[--d->heap_len];
	uint32_t i = 0, n = d->heap_len;
	for (;;) {
		uint32_t c = 2 * i + 1;
		if (c >= n)
			break;
		if (c + 1 < n && slot_less(&d->heap[c + 1], &d->heap[c]))
			c++;
		if (!slot_less(&d->heap[c], &last))
			break;
		d->heap[i] = d->heap[c];
		i = c;
	}
	if (n)
		d->heap[i] = last;
}

static void dir_free(struct dir *d)
{
	free(d->heap);
	free(d->free_bufs);
	free(d->frames);
}

static void dir_init(struct dir *d, const char *name, uint32_t cap, int key_offset, uint64_t default_ns)
{
	d->name = name;
	d->cap = cap;
	d->key_offset = key_offset;
	d->default_ns = default_ns;
	d->min_delay_ns = default_ns;
	d->rx_cost = d->tx_cost = (struct cost){COST_START_NS, COST_START_NS, 0};
	d->heap = calloc(cap, sizeof *d->heap);
	d->free_bufs = calloc(cap, sizeof *d->free_bufs);
	d->frames = calloc(cap, FRAME_MAX); /* untouched pages cost no memory */
	if (!d->heap || !d->free_bufs || !d->frames)
		die("calloc");
	for (uint32_t i = 0; i < cap; i++)
		d->free_bufs[i] = cap - 1 - i;
	d->free_len = cap;
}

static uint64_t delay_for(const struct dir *d, const unsigned char *frame, uint32_t len, int forward)
{
	if (len < 14)
		return d->default_ns;
	uint32_t l3 = 14, type = (uint32_t)frame[12] << 8 | frame[13];
	/* Look through up to two VLAN tags (802.1Q, QinQ) for the IPv4 header. */
	for (int tags = 0; tags < 2 && (type == ETH_P_8021Q || type == ETH_P_8021AD) && l3 + 4 <= len; tags++) {
		type = (uint32_t)frame[l3 + 2] << 8 | frame[l3 + 3];
		l3 += 4;
	}
	if (type == ETH_P_IP && len >= l3 + 20) {
		uint32_t ip;
		memcpy(&ip, frame + l3 + d->key_offset, 4);
		const struct map_entry *e = map_find(ip, 0);
		if (e)
			return forward ? e->fwd_ns : e->rev_ns;
	}
	return d->default_ns;
}

/* Counter updates under the sequence lock, so a reader never sees half of one. */
static void status_begin(struct line_status *st)
{
	__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELAXED);
	__atomic_thread_fence(__ATOMIC_RELEASE);
}

static void status_end(struct line_status *st)
{
	__atomic_thread_fence(__ATOMIC_RELEASE);
	__atomic_store_n(&st->seq, st->seq + 1, __ATOMIC_RELAXED);
}

/* A frame just read from side A into frame buffer buf: queue it (returns 1, the buffer is the
 * line's now) or drop it (returns 0, the caller keeps the buffer). */
static int line_enqueue(struct dir *d, uint64_t t, uint32_t len, uint32_t buf)
{
	struct line_status *st = line.st;
	int queued = 0;
	status_begin(st);
	if (st->backlog_bytes + len > st->limit_bytes || line.count == line.cap) {
		st->drops++;
	} else {
		struct slot *s = &line.ring[(line.head + line.count++) % line.cap];
		*s = (struct slot){.release_ns = t, .seq = d->seq++, .len = len, .buf = buf};
		st->backlog_bytes += len;
		st->backlog_frames++;
		st->enq_frames++;
		st->enq_bytes += len;
		queued = 1;
	}
	status_end(st);
	return queued;
}

/* Take a new limit the toolkit asked for. Like bfifo's, a smaller limit drops nothing queued:
 * arrivals are refused until the backlog is below it. */
static void line_apply_limit(void)
{
	struct line_status *st = line.st;
	uint64_t gen = __atomic_load_n(&st->want_gen, __ATOMIC_ACQUIRE);
	if (gen == st->applied_gen)
		return;
	uint64_t want = __atomic_load_n(&st->want_limit, __ATOMIC_RELAXED);
	status_begin(st);
	if (want > 0)
		st->limit_bytes = want;
	st->applied_gen = gen;
	status_end(st);
}

/* Move every frame whose serialization has started into the delay stage (d's heap, released at
 * its start time plus the host's forward delay); returns the next start time or 0. */
static uint64_t line_release(struct dir *d)
{
	if (!line.on)
		return 0;
	line_apply_limit();
	struct line_status *st = line.st;
	while (line.count) {
		struct slot s = line.ring[line.head];
		uint64_t t = now_ns();
		uint64_t start = s.release_ns > line.free_at_ns ? s.release_ns : line.free_at_ns;
		if (start > t)
			return start;
		status_begin(st);
		if (t - start > line.burst_ns) { /* woken too late to catch up on all of it */
			st->lost_ns += t - start - line.burst_ns;
			start = t - line.burst_ns;
			st->clock_resets++;
		}
		line.head = (line.head + 1) % line.cap;
		line.count--;
		line.free_at_ns = start + (uint64_t)(s.len * line.ns_per_byte);
		st->backlog_bytes -= s.len;
		st->backlog_frames--;
		st->sent_frames++;
		st->sent_bytes += s.len;
		status_end(st);
		s.release_ns = start + delay_for(d, d->frames + (size_t)s.buf * FRAME_MAX, s.len, 1);
		heap_push(d, s);
		if (d->heap_len > d->max_held)
			d->max_held = d->heap_len;
	}
	return 0;
}

/* The next departure of the line: the head of the delay stage when it is paced, or the line's
 * next start plus the smallest delay (with no delay that start is itself the departure). */
static void plan_yield(const struct dir *fwd)
{
	uint64_t at = UINT64_MAX;
	if (fwd->paced && fwd->heap_len)
		at = fwd->heap[0].release_ns;
	if (line.on && line.count) {
		const struct slot *s = &line.ring[line.head];
		uint64_t start = s->release_ns > line.free_at_ns ? s->release_ns : line.free_at_ns;
		if (start + fwd->min_delay_ns < at)
			at = start + fwd->min_delay_ns;
	}
	yield_at_ns = at == UINT64_MAX ? 0 : at;
}

/* How many frames fit in one call before the next departure (most at most; 0: none). */
static uint32_t batch_budget(const struct cost *c, uint32_t most)
{
	if (!yield_at_ns)
		return most;
	uint64_t t = now_ns(), need = YIELD_GUARD_NS + c->call_ns + c->frame_ns;
	if (t - c->last_ns > MAX_DEFER_NS)
		return most;
	if (t + need > yield_at_ns)
		return 0;
	uint64_t n = 1 + (yield_at_ns - t - need) / (c->frame_ns ? c->frame_ns : 1);
	return n < most ? (uint32_t)n : most;
}

static void ewma(uint64_t *avg, uint64_t x)
{
	*avg = (uint64_t)((int64_t)*avg + ((int64_t)x - (int64_t)*avg) / 8);
}

/* A call that moved no frame (an empty socket) or one frame measures the call's own cost; a
 * bigger batch, what each frame adds to it. */
static void note_cost(struct cost *c, uint64_t end_ns, uint64_t elapsed_ns, int frames)
{
	c->last_ns = end_ns;
	if (frames <= 1) {
		ewma(&c->call_ns, elapsed_ns < CALL_CAP_NS ? elapsed_ns : CALL_CAP_NS);
	} else {
		uint64_t per = elapsed_ns > c->call_ns ? (elapsed_ns - c->call_ns) / (uint64_t)(frames - 1) : 0;
		ewma(&c->frame_ns, per < FRAME_CAP_NS ? per : FRAME_CAP_NS);
	}
}

static void line_init(const char *status_path, long slots, double rate_bps, long limit, long burst)
{
	int fd = open(status_path, O_RDWR | O_CREAT | O_TRUNC, 0600);
	if (fd < 0)
		die(status_path);
	if (ftruncate(fd, 4096) < 0)
		die("ftruncate");
	void *m = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
	if (m == MAP_FAILED)
		die("mmap");
	close(fd);
	line.st = m;
	line.on = 1;
	line.cap = (uint32_t)slots;
	line.ring = calloc((size_t)slots, sizeof *line.ring);
	if (!line.ring)
		die("calloc");
	line.ns_per_byte = 8e9 / rate_bps;
	line.burst_ns = (uint64_t)(burst * line.ns_per_byte);
	line.st->limit_bytes = (uint64_t)limit;
	line.st->rate_bps = (uint64_t)rate_bps;
	line.st->burst_bytes = (uint64_t)burst;
	__atomic_store_n(&line.st->magic, LINE_MAGIC, __ATOMIC_RELEASE); /* readers wait for it */
}

/* The VLAN tag the kernel took off (auxdata), or 0 if the frame had none. */
static uint32_t stripped_vlan(struct msghdr *msg)
{
	for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c; c = CMSG_NXTHDR(msg, c)) {
		if (c->cmsg_level != SOL_PACKET || c->cmsg_type != PACKET_AUXDATA)
			continue;
		struct tpacket_auxdata aux;
		memcpy(&aux, CMSG_DATA(c), sizeof aux);
		if (!(aux.tp_status & TP_STATUS_VLAN_VALID))
			return 0;
		uint32_t tpid = aux.tp_status & TP_STATUS_VLAN_TPID_VALID ? aux.tp_vlan_tpid : ETH_P_8021Q;
		return tpid << 16 | aux.tp_vlan_tci;
	}
	return 0;
}

/* Read everything waiting on the input side; returns frames read.
 * One recvmmsg() takes up to RX_BATCH frames: a system call costs about a us on this VM, a good
 * part of a frame's few us of work, and the line's thread also has to make its departures. With
 * it the line (-R 10 Gb/s) carried 275k frames/s on its core without loss where one recvmsg() a
 * frame carried 250k, and at 1.2 x a 1 Gb/s rate it gave up less of its schedule (0.5 % of the
 * time against 0.8 %; bench/results/line-pps.md).
 * Each message gets its own frame buffer, taken off the free stack for the call; those of frames
 * not kept (dropped, or never filled) go back after it. With the pool empty, a batch goes into a
 * scratch buffer only to be counted (MSG_TRUNC still gives each frame's length), as before. */
static int drain_input(struct dir *d, int forward)
{
	static unsigned char scratch[64];
	union {
		struct cmsghdr align;
		char buf[CMSG_SPACE(sizeof(struct tpacket_auxdata))];
	} ctl[RX_BATCH];
	struct iovec iov[RX_BATCH];
	struct mmsghdr mm[RX_BATCH];
	uint32_t bufs[RX_BATCH];
	unsigned char kept[RX_BATCH]; /* 1: the buffer is the line's or the heap's now */
	int n = 0;
	for (;;) {
		/* Input waits in the socket's large buffer while a departure is near. */
		uint32_t most = batch_budget(&d->rx_cost, RX_BATCH);
		if (!most) {
			d->yields++;
			return n;
		}
		/* Never more frames than free buffers: a frame read with a buffer free is never
		 * counted as a pool drop, exactly as when it was read alone. */
		uint32_t have = d->free_len < most ? d->free_len : most;
		unsigned int vlen = have ? have : most;
		uint64_t t0 = now_ns();
		d->free_len -= have;
		for (unsigned int i = 0; i < vlen; i++) {
			if (have) {
				bufs[i] = d->free_bufs[d->free_len + have - 1 - i];
				iov[i] = (struct iovec){.iov_base = d->frames + (size_t)bufs[i] * FRAME_MAX, .iov_len = FRAME_MAX};
			} else {
				iov[i] = (struct iovec){.iov_base = scratch, .iov_len = sizeof scratch};
			}
			/* The kernel rewrites msg_controllen (and msg_flags): set afresh for every call. */
			mm[i].msg_hdr = (struct msghdr){.msg_iov = &iov[i], .msg_iovlen = 1, .msg_control = &ctl[i],
							.msg_controllen = sizeof ctl[i]};
		}
		int got = recvmmsg(d->in_fd, mm, vlen, MSG_DONTWAIT | MSG_TRUNC, NULL);
		int err = got < 0 ? errno : 0;
		if (err && err != EINTR && err != EAGAIN && err != EWOULDBLOCK)
			die("recv");
		/* One clock reading for the batch: every frame in it was waiting by now, none is dated
		 * before it was read (as each was read alone, the time is the read's, not the wire's:
		 * kernel timestamps cannot be had, see the header comment). Frames read earlier in the
		 * call are dated late by at most the call's length, a few us for RX_BATCH frames. For
		 * the line that only matters when it was idle: the first frame of the batch starts then,
		 * the rest queue behind it one frame time apart (start = max(arrival, free_at)), so the
		 * paced departures do not depend on it; for the delay stage it is constant per batch. */
		uint64_t t = now_ns();
		note_cost(&d->rx_cost, t, t - t0, got < 0 ? 0 : got);
		memset(kept, 0, sizeof kept);
		for (int i = 0; i < got; i++) {
			uint32_t r = mm[i].msg_len;
			unsigned char *buf = iov[i].iov_base;
			d->last_rx_ns = t;
			d->last_rx_len = r;
			d->rx_run_bytes += r;
			n++;
			d->rx_frames++;
			d->rx_bytes += r;
			if (!have) {
				d->drop_full++;
				continue;
			}
			uint32_t vlan = stripped_vlan(&mm[i].msg_hdr);
			if ((size_t)r + (vlan ? 4 : 0) > FRAME_MAX) {
				d->drop_oversize++;
				continue;
			}
			if (vlan && r >= 12) { /* the tag goes back after the MAC addresses */
				memmove(buf + 16, buf + 12, (size_t)r - 12);
				uint32_t be = htonl(vlan);
				memcpy(buf + 12, &be, 4);
				r += 4;
			}
			if (forward && line.on) {
				kept[i] = (unsigned char)line_enqueue(d, t, r, bufs[i]);
				continue;
			}
			struct slot s = {.release_ns = t + delay_for(d, buf, r, forward), .seq = d->seq++, .len = r,
					 .buf = bufs[i]};
			kept[i] = 1;
			heap_push(d, s);
			if (d->heap_len > d->max_held)
				d->max_held = d->heap_len;
		}
		/* The buffers not kept go back, the first message's on top, as they were taken. */
		for (uint32_t i = have; i-- > 0;)
			if (!kept[i])
				d->free_bufs[d->free_len++] = bufs[i];
		if (forward && line.on) /* a frame that found the line idle may leave soon */
			plan_yield(d);
		/* Fewer frames than asked for: the socket is empty (no need to hear EAGAIN again). */
		if (err ? err != EINTR : (unsigned int)got < vlen)
			return n;
	}
}

/* Send every frame whose time has come; returns the next release time or 0.
 * Frames due by the same clock reading leave in one sendmmsg() (TX_BATCH at most): frames read
 * in one batch that have the same delay (acks) are due together, and each send() is a system
 * call of a few us here. Not the line's departures (d->paced): each of those leaves in a send()
 * of its own when its time has come, and its lateness is taken against a clock reading of its
 * own. In a batch, lateness is that of the call's start (later frames leave a few us after). */
static uint64_t release_due(struct dir *d)
{
	struct slot due[TX_BATCH];
	struct iovec iov[TX_BATCH];
	struct mmsghdr mm[TX_BATCH];
	uint32_t most = d->paced ? 1 : TX_BATCH;
	while (d->heap_len) {
		uint64_t t = now_ns();
		if (d->heap[0].release_ns > t)
			return d->heap[0].release_ns;
		uint32_t cap = most;
		if (!d->paced && !(cap = batch_budget(&d->tx_cost, most))) {
			d->yields++;
			return t; /* due now: after the departure */
		}
		uint32_t n = 0;
		while (n < cap && d->heap_len && d->heap[0].release_ns <= t) {
			due[n] = d->heap[0];
			heap_pop(d);
			iov[n] = (struct iovec){.iov_base = d->frames + (size_t)due[n].buf * FRAME_MAX, .iov_len = due[n].len};
			mm[n].msg_hdr = (struct msghdr){.msg_iov = &iov[n], .msg_iovlen = 1};
			n++;
		}
		for (uint32_t i = 0; i < n;) {
			int w;
			uint64_t t0 = now_ns();
			if (n - i == 1)
				w = send(d->out_fd, iov[i].iov_base, iov[i].iov_len, 0) < 0 ? -1 : 1;
			else
				w = sendmmsg(d->out_fd, mm + i, n - i, 0);
			if (w > 0) {
				uint64_t t1 = now_ns();
				note_cost(&d->tx_cost, t1, t1 - t0, w);
			}
			if (w < 0 && errno == EINTR)
				continue;
			if (w < 0) {
				/* This frame was refused. (sendmmsg reports an error after the first frame
				 * only by sending fewer: the frame it stopped at is tried again on its own.) */
				d->drop_send++;
				d->free_bufs[d->free_len++] = due[i++].buf;
				continue;
			}
			for (int k = 0; k < w; k++, i++) {
				d->tx_frames++;
				d->tx_bytes += due[i].len;
				uint64_t late = t - due[i].release_ns;
				d->late_sum_ns += late;
				if (late > d->late_max_ns)
					d->late_max_ns = late;
				uint64_t b = late / 1000;
				d->late_hist[b < LATE_BUCKETS ? b : LATE_BUCKETS - 1]++;
				d->free_bufs[d->free_len++] = due[i].buf;
			}
		}
	}
	return 0;
}

static void read_kernel_drops(struct dir *d)
{
	struct tpacket_stats st;
	socklen_t len = sizeof st;
	/* Reading PACKET_STATISTICS resets the kernel's counters, so accumulate. */
	if (getsockopt(d->in_fd, SOL_PACKET, PACKET_STATISTICS, &st, &len) == 0)
		d->drop_kernel += st.tp_drops;
}

/* Lateness quantile in us from the histogram (upper edge of the bucket), -1 if nothing sent. */
static double late_quantile(const struct dir *d, double q)
{
	uint64_t total = 0, acc = 0;
	for (int i = 0; i < LATE_BUCKETS; i++)
		total += d->late_hist[i];
	if (!total)
		return -1;
	for (int i = 0; i < LATE_BUCKETS; i++) {
		acc += d->late_hist[i];
		if ((double)acc >= q * (double)total)
			return i + 1;
	}
	return LATE_BUCKETS;
}

static void dir_json(FILE *f, struct dir *d)
{
	fprintf(f,
		"\"%s\": {\"rx_frames\": %llu, \"rx_bytes\": %llu, \"tx_frames\": %llu, \"tx_bytes\": %llu, "
		"\"held\": %u, \"max_held\": %llu, \"drop_pool_full\": %llu, \"drop_oversize\": %llu, "
		"\"drop_send_error\": %llu, \"drop_kernel\": %llu, \"late_max_us\": %.3f, \"late_mean_us\": %.3f, "
		"\"late_p50_us\": %.0f, \"late_p99_us\": %.0f, \"yields\": %llu, \"rx_call_ns\": %llu, "
		"\"rx_frame_ns\": %llu, \"tx_call_ns\": %llu, \"tx_frame_ns\": %llu}",
		d->name, (unsigned long long)d->rx_frames, (unsigned long long)d->rx_bytes,
		(unsigned long long)d->tx_frames, (unsigned long long)d->tx_bytes, d->heap_len,
		(unsigned long long)d->max_held, (unsigned long long)d->drop_full, (unsigned long long)d->drop_oversize,
		(unsigned long long)d->drop_send, (unsigned long long)d->drop_kernel, d->late_max_ns / 1e3,
		d->tx_frames ? d->late_sum_ns / 1e3 / (double)d->tx_frames : 0.0, late_quantile(d, 0.5),
		late_quantile(d, 0.99), (unsigned long long)d->yields, (unsigned long long)d->rx_cost.call_ns,
		(unsigned long long)d->rx_cost.frame_ns, (unsigned long long)d->tx_cost.call_ns,
		(unsigned long long)d->tx_cost.frame_ns);
}

static void write_stats(const char *path, struct dir *fwd, struct dir *rev, const struct pacer *p)
{
	if (!path)
		return;
	read_kernel_drops(fwd);
	read_kernel_drops(rev);
	char tmp[4096];
	snprintf(tmp, sizeof tmp, "%s.tmp", path);
	FILE *f = fopen(tmp, "w");
	if (!f)
		return;
	fprintf(f, "{\"pid\": %d, \"time_ns\": %llu, ", (int)getpid(), (unsigned long long)now_ns());
	dir_json(f, fwd);
	fputs(", ", f);
	dir_json(f, rev);
	if (line.on)
		fprintf(f,
			", \"line\": {\"limit_bytes\": %llu, \"backlog_bytes\": %llu, \"enq_frames\": %llu, "
			"\"sent_frames\": %llu, \"drops\": %llu, \"clock_resets\": %llu, \"lost_ns\": %llu}",
			(unsigned long long)line.st->limit_bytes, (unsigned long long)line.st->backlog_bytes,
			(unsigned long long)line.st->enq_frames, (unsigned long long)line.st->sent_frames,
			(unsigned long long)line.st->drops, (unsigned long long)line.st->clock_resets,
			(unsigned long long)line.st->lost_ns);
	if (p->fd >= 0)
		fprintf(f,
			", \"pacer\": {\"on\": %s, \"kicks\": %llu, \"hits\": %llu, \"grid_hits\": %llu, "
			"\"send_errors\": %llu, \"last_errno\": %d, \"late_mean_us\": %.3f, \"late_max_us\": %.3f}",
			pacing_off ? "false" : "true", (unsigned long long)p->kicks, (unsigned long long)p->hits,
			(unsigned long long)p->grid_hits, (unsigned long long)p->send_errors, p->last_errno,
			p->grid_hits ? p->late_sum_ns / 1e3 / (double)p->grid_hits : 0.0, p->late_max_ns / 1e3);
	fputs("}\n", f);
	if (fclose(f) == 0)
		rename(tmp, path);
}

/* After side A was drained: plan probes after a departure we did not cause. */
static void pacer_observe(struct pacer *p, struct dir *d)
{
	if (p->fd < 0 || d->last_rx_ns <= p->seen_ns)
		return;
	p->seen_ns = d->last_rx_ns;
	uint64_t due = d->last_rx_ns + (uint64_t)(d->last_rx_len * p->ns_per_byte);
	p->next_ns = due - PROBE_EARLY_NS;
	p->until_ns = due + PROBE_LATE_NS;
	d->rx_run_bytes = 0;
}

/* Kick if due; returns the next kick time, or 0 if none is planned. */
static uint64_t pacer_run(struct pacer *p, struct dir *fwd)
{
	static const unsigned char kick[60] = {0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02, 0, 0, 0, 0, 0, 0x88, 0xb5};
	if (p->fd < 0 || pacing_off || !p->next_ns)
		return 0;
	uint64_t t = now_ns();
	if (t < p->next_ns)
		return p->next_ns;
	/* Frames that left before this kick are someone else's departures. */
	drain_input(fwd, 1);
	pacer_observe(p, fwd);
	if (t < p->next_ns)
		return p->next_ns;
	uint64_t due = p->next_ns, on_grid = p->until_ns == due + GRID_SLACK_NS;
	p->kicks++;
	if (send(p->fd, kick, sizeof kick, MSG_DONTWAIT) < 0) {
		p->send_errors++;
		p->last_errno = errno;
	}
	/* A frame the kick released went through the veth to side A inside send(). */
	fwd->rx_run_bytes = 0;
	drain_input(fwd, 1);
	if (fwd->rx_run_bytes) {
		uint64_t late = t - due;
		p->hits++;
		if (on_grid) {
			p->grid_hits++;
			p->late_sum_ns += late;
			if (late > p->late_max_ns)
				p->late_max_ns = late;
		}
		p->seen_ns = fwd->last_rx_ns;
		/* The shaper keeps the tokens of our lateness, so the next frame is due one frame time
		 * after this one was due; far behind (preempted), start again from now. */
		uint64_t step = (uint64_t)(fwd->rx_run_bytes * p->ns_per_byte);
		p->next_ns = (on_grid && late < step / 2 ? due : t) + step;
		p->until_ns = p->next_ns + GRID_SLACK_NS;
		fwd->rx_run_bytes = 0;
	} else {
		p->next_ns = t + PROBE_NS <= p->until_ns ? t + PROBE_NS : 0;
	}
	return p->next_ns;
}

static void usage(void)
{
	fputs("usage: bsz-delayline -a IFACE -b IFACE [-f US] [-r US] [-m MAPFILE] [-n SLOTS] [-s STATS]"
	      " [-i MS] [-p RTPRIO] [-w US] [-c CPU] [-k FD -R BPS] [-L BYTES -R BPS [-B BYTES] -q STATUS]\n",
	      stderr);
	exit(2);
}

int main(int argc, char **argv)
{
	const char *side_a = NULL, *side_b = NULL, *map_path = NULL, *stats_path = NULL;
	double fwd_us = 0, rev_us = 0;
	long slots = 65536, interval_ms = 200, rtprio = 0, spin_us = 0, cpu = -1;
	struct pacer pacer = {.fd = -1};
	double rate_bps = 0;
	long kick_fd = -1, line_limit = -1, line_burst = 2 * 1514;
	const char *status_path = NULL;
	int opt;
	while ((opt = getopt(argc, argv, "a:b:f:r:m:n:s:i:p:w:c:k:R:L:B:q:")) != -1) {
		switch (opt) {
		case 'a': side_a = optarg; break;
		case 'b': side_b = optarg; break;
		case 'f': if (!parse_delay_us(optarg, &fwd_us)) usage(); break;
		case 'r': if (!parse_delay_us(optarg, &rev_us)) usage(); break;
		case 'm': map_path = optarg; break;
		case 'n': slots = atol(optarg); break;
		case 's': stats_path = optarg; break;
		case 'i': interval_ms = atol(optarg); break;
		case 'p': rtprio = atol(optarg); break;
		case 'w': spin_us = atol(optarg); break;
		case 'c': if (!parse_long(optarg, 0, CPU_SETSIZE - 1, &cpu)) usage(); break;
		case 'k': if (!parse_long(optarg, 0, INT32_MAX, &kick_fd)) usage(); break;
		case 'L': if (!parse_long(optarg, 60, 1l << 32, &line_limit)) usage(); break;
		case 'B': if (!parse_long(optarg, 60, 1l << 32, &line_burst)) usage(); break;
		case 'q': status_path = optarg; break;
		case 'R': {
			char *end;
			rate_bps = strtod(optarg, &end);
			if (end == optarg || *end || !isfinite(rate_bps) || rate_bps < 1e3 || rate_bps > 1e12)
				usage();
			break;
		}
		default: usage();
		}
	}
	if (!side_a || !side_b || slots < 16 || slots > (1 << 22) || interval_ms < 10 || spin_us < 0 ||
	    (rate_bps > 0) != (kick_fd >= 0 || line_limit >= 0) || (kick_fd >= 0 && line_limit >= 0) ||
	    (line_limit >= 0) != (status_path != NULL))
		usage();
	if (line_limit >= 0)
		line_init(status_path, slots, rate_bps, line_limit, line_burst);
	pacer.fd = (int)kick_fd;
	pacer.ns_per_byte = rate_bps > 0 ? 8e9 / rate_bps : 0;
	if (cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET((int)cpu, &set);
		if (sched_setaffinity(0, sizeof set, &set) < 0)
			die("sched_setaffinity");
	}
	if (map_path)
		load_map(map_path);

	/* Wake-ups must be on time: the default 50 us timer slack would be jitter. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	if (rtprio > 0) {
		struct sched_param sp = {.sched_priority = (int)rtprio};
		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			die("sched_setscheduler");
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction su = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
	sigaction(SIGUSR1, &su, NULL);

	int if_a, if_b;
	int fd_a = open_side(side_a, &if_a), fd_b = open_side(side_b, &if_b);
	struct dir fwd = {0}, rev = {0};
	dir_init(&fwd, "forward", (uint32_t)slots, 12, (uint64_t)(fwd_us * 1000.0)); /* IPv4 source */
	dir_init(&rev, "reverse", (uint32_t)slots, 16, (uint64_t)(rev_us * 1000.0)); /* IPv4 destination */
	fwd.in_fd = fd_a, fwd.out_fd = fd_b, fwd.out_ifindex = if_b;
	rev.in_fd = fd_b, rev.out_fd = fd_a, rev.out_ifindex = if_a;
	fwd.paced = line.on;
	for (int i = 0; i < MAP_SIZE; i++) /* the map's delays can be shorter than the default */
		if (map[i].ip && map[i].fwd_ns < fwd.min_delay_ns)
			fwd.min_delay_ns = map[i].fwd_ns;

	/* Tell whoever started us that both sockets are open. */
	write_stats(stats_path, &fwd, &rev, &pacer);
	fprintf(stdout, "ready\n");
	fflush(stdout);

	uint64_t interval_ns = (uint64_t)interval_ms * 1000000ull, next_stats = now_ns() + interval_ns;
	uint64_t spin_ns = (uint64_t)spin_us * 1000ull;
	struct pollfd pfd[2] = {{.fd = fd_a, .events = POLLIN}, {.fd = fd_b, .events = POLLIN}};
	while (!stop_requested) {
		uint64_t n4 = line_release(&fwd);
		uint64_t n3 = pacer_run(&pacer, &fwd), n1 = release_due(&fwd);
		if (line.on)
			plan_yield(&fwd);
		uint64_t n2 = release_due(&rev);
		uint64_t next = next_stats;
		if (n4 && n4 < next)
			next = n4;
		if (n3 && n3 < next)
			next = n3;
		if (n1 && n1 < next)
			next = n1;
		if (n2 && n2 < next)
			next = n2;
		uint64_t t = now_ns();
		/* The stats file waits for a gap between departures, but not beyond a second interval. */
		struct cost stats_cost = {STATS_COST_NS, 0, t}; /* never "overdue": its own limit is below */
		if (t >= next_stats && (batch_budget(&stats_cost, 1) || t >= next_stats + interval_ns)) {
			write_stats(stats_path, &fwd, &rev, &pacer);
			next_stats = t + interval_ns;
			continue;
		}
		uint64_t wait = next > t ? next - t : 0;
		/* Very near a release, poll without sleeping so the frame leaves on time. */
		struct timespec ts = {0, 0};
		if (wait > spin_ns) {
			wait -= spin_ns;
			ts.tv_sec = (time_t)(wait / 1000000000ull);
			ts.tv_nsec = (long)(wait % 1000000000ull);
		}
		int r = ppoll(pfd, 2, &ts, NULL);
		if (r < 0 && errno != EINTR)
			die("ppoll");
		if (r > 0) {
			if (line.on)
				plan_yield(&fwd);
			if (pfd[0].revents & POLLIN) {
				drain_input(&fwd, 1);
				pacer_observe(&pacer, &fwd);
			}
			if (pfd[1].revents & POLLIN)
				drain_input(&rev, 0);
			if ((pfd[0].revents | pfd[1].revents) & (POLLERR | POLLNVAL)) {
				fputs("bsz-delayline: interface went away\n", stderr);
				break;
			}
		}
	}
	write_stats(stats_path, &fwd, &rev, &pacer);
	dir_free(&fwd); /* so LeakSanitizer's exit check passes */
	dir_free(&rev);
	free(line.ring);
	return 0;
}
