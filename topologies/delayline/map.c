/*
 * The per-host delay map (-m): parsing the file and finding a host's delays by its IPv4 address.
 * Part of bsz-delayline's one translation unit (delayline.c includes it); see delayline.c.
 */
#include "common.h"

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
