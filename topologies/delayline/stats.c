/*
 * The stats file (-s): every counter of both directions, the line and the pacer, written atomically.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#include "common.h"

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
