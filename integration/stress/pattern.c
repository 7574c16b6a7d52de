/*
 * pattern.c — what both ends compute alike: the random generators that plan
 * sizes and operations, the payload stream (byte o of direction d of
 * connection i is a pure function of (seed, i, d, o)) and CRC32C.
 */
#include <endian.h>
#include <string.h>

#include "stress.h"

/* ------------------------------------------------------ random generators */

struct rng rng_for(uint64_t seed, uint32_t id, unsigned what)
{
	struct rng r = { fmix64(seed ^ fmix64(((uint64_t)id << 8 | what) + 0x51ed27)) };
	return r;
}

/* Log-uniform in [1, max]: pick an octave, then a value inside it. */
uint64_t rand_logu(struct rng *r, uint64_t max)
{
	if (max <= 1)
		return 1;
	int bits = 64 - __builtin_clzll(max);
	uint64_t lo = 1ull << (rnext(r) % bits);
	uint64_t hi = lo * 2 - 1 > max ? max : lo * 2 - 1;
	return lo + rnext(r) % (hi - lo + 1);
}

/* ------------------------------------------------------ the payload stream */

/* Key of one direction (0: client->server, 1: server->client). */
uint64_t stream_key(uint64_t seed, uint32_t id, int dir)
{
	return fmix64(seed ^ fmix64(((uint64_t)id << 1 | (uint64_t)dir) + 0x5bd1e995));
}

/* Byte o of a stream is byte (o & 7) (little-endian) of word o >> 3. */
static inline uint64_t gen_word(uint64_t key, uint64_t k)
{
	return fmix64(key ^ (k * 0xd6e8feb86659fd93ULL + 0x9e3779b97f4a7c15ULL));
}

static inline uint8_t gen_byte(uint64_t key, uint64_t off)
{
	return (uint8_t)(gen_word(key, off >> 3) >> (8 * (off & 7)));
}

void gen_fill(uint64_t key, uint64_t off, uint8_t *p, size_t n)
{
	for (; n && (off & 7); n--)
		*p++ = gen_byte(key, off++);
	uint64_t k = off >> 3;
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w = htole64(gen_word(key, k++));
		memcpy(p, &w, 8);
	}
	for (off = k << 3; n; n--)
		*p++ = gen_byte(key, off++);
}

/* ---------------------------------------------------------------- CRC32C */

static uint32_t crc_tab[8][256];
static bool crc_hw;

void crc_init(void)
{
	for (unsigned i = 0; i < 256; i++) {
		uint32_t c = i;
		for (int k = 0; k < 8; k++)
			c = c & 1 ? (c >> 1) ^ 0x82f63b78u : c >> 1;
		crc_tab[0][i] = c;
	}
	for (unsigned i = 0; i < 256; i++)
		for (int t = 1; t < 8; t++)
			crc_tab[t][i] = (crc_tab[t - 1][i] >> 8) ^ crc_tab[0][crc_tab[t - 1][i] & 0xff];
#if defined(__x86_64__)
	__builtin_cpu_init();
	crc_hw = __builtin_cpu_supports("sse4.2");
#endif
}

#if defined(__x86_64__)
__attribute__((target("sse4.2")))
static uint32_t crc_hw_run(uint32_t c, const uint8_t *p, size_t n)
{
	uint64_t c64 = c;
	for (; n && ((uintptr_t)p & 7); n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		c64 = __builtin_ia32_crc32di(c64, w);
	}
	for (; n; n--)
		c64 = __builtin_ia32_crc32qi((uint32_t)c64, *p++);
	return (uint32_t)c64;
}
#endif

uint32_t crc32c(uint32_t crc, const void *buf, size_t n)
{
	const uint8_t *p = buf;
	uint32_t c = ~crc;
#if defined(__x86_64__)
	if (crc_hw)
		return ~crc_hw_run(c, p, n);
#endif
	for (; n >= 8; n -= 8, p += 8) {
		uint64_t w;
		memcpy(&w, p, 8);
		w = le64toh(w) ^ c;
		c = crc_tab[7][w & 0xff] ^ crc_tab[6][(w >> 8) & 0xff] ^
		    crc_tab[5][(w >> 16) & 0xff] ^ crc_tab[4][(w >> 24) & 0xff] ^
		    crc_tab[3][(w >> 32) & 0xff] ^ crc_tab[2][(w >> 40) & 0xff] ^
		    crc_tab[1][(w >> 48) & 0xff] ^ crc_tab[0][w >> 56];
	}
	for (; n; n--)
		c = (c >> 8) ^ crc_tab[0][(c ^ *p++) & 0xff];
	return ~c;
}
