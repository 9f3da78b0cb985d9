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
/*
 * The parts, one file per job, compiled as this one translation unit (so every function stays static
 * and the pacing loop is inlined as one unit would be; the fuzz target includes this file whole):
 *   common.h  limits, the state of a direction, the line and the pacer; the clock
 *   map.c     the per-host delay map (-m)
 *   wire.c    the two sides' sockets, reading frames in batches
 *   delay.c   each direction's held frames and their release
 *   line.c    the line shaper (-L) and its status page
 *   pacer.c   the kick frames of -k
 *   stats.c   the stats file (-s)
 * This file: the options, the set-up and the event loop.
 */
#include "common.h"
#include "map.c"
#include "wire.c"
#include "delay.c"
#include "line.c"
#include "pacer.c"
#include "stats.c"

static void usage(void)
{
	fputs("usage: bsz-delayline -a IFACE -b IFACE [-f US] [-r US] [-m MAPFILE] [-n SLOTS] [-s STATS]"
	      " [-i MS] [-p RTPRIO] [-w US] [-c CPU] [-k FD -R BPS] [-L BYTES -R BPS [-B BYTES] -q STATUS]\n",
	      stderr);
	exit(2);
}

/* What the command line asks for (the header comment says what each option means). */
struct options {
	const char *side_a, *side_b, *map_path, *stats_path, *status_path;
	double fwd_us, rev_us, rate_bps;
	long slots, interval_ms, rtprio, spin_us, cpu, kick_fd, line_limit, line_burst;
};

static void parse_options(int argc, char **argv, struct options *o)
{
	*o = (struct options){.slots = 65536, .interval_ms = 200, .cpu = -1, .kick_fd = -1, .line_limit = -1,
			      .line_burst = 2 * 1514};
	int opt;
	while ((opt = getopt(argc, argv, "a:b:f:r:m:n:s:i:p:w:c:k:R:L:B:q:")) != -1) {
		switch (opt) {
		case 'a': o->side_a = optarg; break;
		case 'b': o->side_b = optarg; break;
		case 'f': if (!parse_delay_us(optarg, &o->fwd_us)) usage(); break;
		case 'r': if (!parse_delay_us(optarg, &o->rev_us)) usage(); break;
		case 'm': o->map_path = optarg; break;
		case 'n': o->slots = atol(optarg); break;
		case 's': o->stats_path = optarg; break;
		case 'i': o->interval_ms = atol(optarg); break;
		case 'p': o->rtprio = atol(optarg); break;
		case 'w': o->spin_us = atol(optarg); break;
		case 'c': if (!parse_long(optarg, 0, CPU_SETSIZE - 1, &o->cpu)) usage(); break;
		case 'k': if (!parse_long(optarg, 0, INT32_MAX, &o->kick_fd)) usage(); break;
		case 'L': if (!parse_long(optarg, 60, 1l << 32, &o->line_limit)) usage(); break;
		case 'B': if (!parse_long(optarg, 60, 1l << 32, &o->line_burst)) usage(); break;
		case 'q': o->status_path = optarg; break;
		case 'R': {
			char *end;
			o->rate_bps = strtod(optarg, &end);
			if (end == optarg || *end || !isfinite(o->rate_bps) || o->rate_bps < 1e3 || o->rate_bps > 1e12)
				usage();
			break;
		}
		default: usage();
		}
	}
	if (!o->side_a || !o->side_b || o->slots < 16 || o->slots > (1 << 22) || o->interval_ms < 10 ||
	    o->spin_us < 0 || (o->rate_bps > 0) != (o->kick_fd >= 0 || o->line_limit >= 0) ||
	    (o->kick_fd >= 0 && o->line_limit >= 0) || (o->line_limit >= 0) != (o->status_path != NULL))
		usage();
}

/* This process's CPU, timer slack, priority and signals, as the options ask. */
static void set_up_process(const struct options *o)
{
	if (o->cpu >= 0) {
		cpu_set_t set;
		CPU_ZERO(&set);
		CPU_SET((int)o->cpu, &set);
		if (sched_setaffinity(0, sizeof set, &set) < 0)
			die("sched_setaffinity");
	}
	/* Wake-ups must be on time: the default 50 us timer slack would be jitter. */
	prctl(PR_SET_TIMERSLACK, 1UL, 0, 0, 0);
	if (o->rtprio > 0) {
		struct sched_param sp = {.sched_priority = (int)o->rtprio};
		if (sched_setscheduler(0, SCHED_FIFO, &sp) < 0)
			die("sched_setscheduler");
	}
	struct sigaction sa = {.sa_handler = on_signal};
	sigaction(SIGTERM, &sa, NULL);
	sigaction(SIGINT, &sa, NULL);
	signal(SIGPIPE, SIG_IGN);
	struct sigaction su = {.sa_handler = on_usr1, .sa_flags = SA_RESTART};
	sigaction(SIGUSR1, &su, NULL);
}

/* The earliest of the times given, 0 (none) left out. */
static uint64_t earliest(uint64_t next, const uint64_t *times, int n)
{
	for (int i = 0; i < n; i++)
		if (times[i] && times[i] < next)
			next = times[i];
	return next;
}

/* Until a signal: release what is due (the line's departure first), write the stats file between
 * departures, and sleep until the next release or input. */
static void event_loop(struct dir *fwd, struct dir *rev, struct pacer *pacer, const struct options *o)
{
	uint64_t interval_ns = (uint64_t)o->interval_ms * 1000000ull, next_stats = now_ns() + interval_ns;
	uint64_t spin_ns = (uint64_t)o->spin_us * 1000ull;
	struct pollfd pfd[2] = {{.fd = fwd->in_fd, .events = POLLIN}, {.fd = rev->in_fd, .events = POLLIN}};
	while (!stop_requested) {
		uint64_t due[4];
		due[0] = line_release(fwd);
		due[1] = pacer_run(pacer, fwd), due[2] = release_due(fwd);
		if (line.on)
			plan_yield(fwd);
		due[3] = release_due(rev);
		uint64_t next = earliest(next_stats, due, 4);
		uint64_t t = now_ns();
		/* The stats file waits for a gap between departures, but not beyond a second interval. */
		struct cost stats_cost = {STATS_COST_NS, 0, t}; /* never "overdue": its own limit is below */
		if (t >= next_stats && (batch_budget(&stats_cost, 1) || t >= next_stats + interval_ns)) {
			write_stats(o->stats_path, fwd, rev, pacer);
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
				plan_yield(fwd);
			if (pfd[0].revents & POLLIN) {
				drain_input(fwd, 1);
				pacer_observe(pacer, fwd);
			}
			if (pfd[1].revents & POLLIN)
				drain_input(rev, 0);
			if ((pfd[0].revents | pfd[1].revents) & (POLLERR | POLLNVAL)) {
				fputs("bsz-delayline: interface went away\n", stderr);
				break;
			}
		}
	}
}

int main(int argc, char **argv)
{
	struct options o;
	parse_options(argc, argv, &o);
	if (o.line_limit >= 0)
		line_init(o.status_path, o.slots, o.rate_bps, o.line_limit, o.line_burst);
	struct pacer pacer = {.fd = (int)o.kick_fd, .ns_per_byte = o.rate_bps > 0 ? 8e9 / o.rate_bps : 0};
	if (o.map_path)
		load_map(o.map_path);
	set_up_process(&o);

	int if_a, if_b;
	int fd_a = open_side(o.side_a, &if_a), fd_b = open_side(o.side_b, &if_b);
	struct dir fwd = {0}, rev = {0};
	dir_init(&fwd, "forward", (uint32_t)o.slots, 12, (uint64_t)(o.fwd_us * 1000.0)); /* IPv4 source */
	dir_init(&rev, "reverse", (uint32_t)o.slots, 16, (uint64_t)(o.rev_us * 1000.0)); /* IPv4 destination */
	fwd.in_fd = fd_a, fwd.out_fd = fd_b, fwd.out_ifindex = if_b;
	rev.in_fd = fd_b, rev.out_fd = fd_a, rev.out_ifindex = if_a;
	fwd.paced = line.on;
	for (int i = 0; i < MAP_SIZE; i++) /* the map's delays can be shorter than the default */
		if (map[i].ip && map[i].fwd_ns < fwd.min_delay_ns)
			fwd.min_delay_ns = map[i].fwd_ns;

	/* Tell whoever started us that both sockets are open. */
	write_stats(o.stats_path, &fwd, &rev, &pacer);
	fprintf(stdout, "ready\n");
	fflush(stdout);
	event_loop(&fwd, &rev, &pacer, &o);
	write_stats(o.stats_path, &fwd, &rev, &pacer);
	dir_free(&fwd); /* so LeakSanitizer's exit check passes */
	dir_free(&rev);
	free(line.ring);
	return 0;
}
