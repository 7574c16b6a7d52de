/* ready_rules: payloads that are a pure function of (seed, connection,
 * direction, sequence), and their checksums. */
#include <string.h>

#include "ready_rules.h"

uint64_t msg_key(uint32_t id, int dir, uint64_t seq)
{
	return mix64(seed ^ mix64(((uint64_t)id << 40) ^ ((uint64_t)dir << 39) ^ seq));
}

/* Bytes [off, off + n) of the payload that key names. */
void gen_bytes(uint64_t key, uint64_t off, unsigned char *dst, size_t n)
{
	while (n) {
		uint64_t w = mix64(key + (off / 8) * 0x632be59bd9b4e019ull);
		unsigned b = (unsigned)(off % 8);
		size_t take = 8 - b < n ? 8 - b : n;

		if (take == 8)
			memcpy(dst, &w, 8);
		else
			for (size_t i = 0; i < take; i++)
				dst[i] = (unsigned char)(w >> (8 * (b + i)));
		dst += take;
		off += take;
		n -= take;
	}
}

void cs_init(struct csum *s)
{
	*s = (struct csum){ .h = 0xcbf29ce484222325ull };
}

static inline void cs_word(struct csum *s, uint64_t w)
{
	s->h = (s->h ^ w) * 0x100000001b3ull;
	s->h ^= s->h >> 29;
}

void cs_add(struct csum *s, const unsigned char *p, size_t n)
{
	while (n && s->nb) {
		s->cur |= (uint64_t)*p++ << (8 * s->nb);
		n--;
		if (++s->nb == 8) {
			cs_word(s, s->cur);
			s->cur = 0;
			s->nb = 0;
		}
	}
	for (; n >= 8; p += 8, n -= 8) {
		uint64_t w;

		memcpy(&w, p, 8);
		cs_word(s, w);
	}
	while (n--)
		s->cur |= (uint64_t)*p++ << (8 * s->nb++);
}

uint64_t cs_end(struct csum *s, uint64_t len)
{
	if (s->nb)
		cs_word(s, s->cur);
	cs_word(s, len);
	return s->h;
}

__thread unsigned char vbuf[CHUNK];

uint64_t payload_sum(uint64_t key, uint32_t len)
{
	struct csum s;

	cs_init(&s);
	for (uint32_t off = 0; off < len;) {
		uint32_t k = len - off < CHUNK ? len - off : CHUNK;

		gen_bytes(key, off, vbuf, k);
		cs_add(&s, vbuf, k);
		off += k;
	}
	return cs_end(&s, len);
}
