/*
 * libFuzzer target for the delay line's two parsers of outside input:
 *   - delay_for(): a frame off the wire (Ethernet, up to two VLAN tags, the IPv4 address that
 *     picks the delay), for either direction;
 *   - load_map(): the per-host delay file ("a.b.c.d fwd_us rev_us" lines).
 * The first input byte chooses the parser and the direction; the rest is the frame or the file.
 * The delay line's own code is compiled in unchanged; its exits on a refused map become a return
 * to the fuzzer here. Built by `make fuzz` (clang, -fsanitize=fuzzer,address,undefined); run
 * time-boxed by tests/test_delayline_fuzz.py and longer by bench/fuzz_delayline.sh.
 */
#define _GNU_SOURCE
#include <setjmp.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <unistd.h>

static jmp_buf fuzz_back;
static int fuzz_catching;

/* A refused map is exit(2) in the delay line: come back instead (the FILE and the line buffer of
 * that call are left, as the process would have ended; leak detection is off for this target). */
static void fuzz_exit(int code)
{
	if (fuzz_catching)
		longjmp(fuzz_back, 1);
	exit(code);
}

#define exit(code) fuzz_exit(code)
#define main delayline_main
#include "delayline.c"
#undef main
#undef exit

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	if (size < 1)
		return 0;
	uint8_t how = data[0];
	data++, size--;
	if (how & 1) {
		/* The fuzzer's own buffer, exactly `size` long: a read past the frame is a sanitizer report. */
		struct dir d = {.key_offset = (how & 2) ? 12 : 16, .default_ns = 1000};
		uint32_t len = size > FRAME_MAX ? FRAME_MAX : (uint32_t)size;
		volatile uint64_t ns = delay_for(&d, data, len, how & 4);
		(void)ns;
		return 0;
	}
	int fd = memfd_create("bsz-map", 0);
	if (fd < 0)
		return 0;
	if (write(fd, data, size) == (ssize_t)size) {
		char path[64];
		snprintf(path, sizeof path, "/proc/self/fd/%d", fd);
		memset(map, 0, sizeof map);
		fuzz_catching = 1;
		if (!setjmp(fuzz_back))
			load_map(path);
		fuzz_catching = 0;
	}
	close(fd);
	return 0;
}
