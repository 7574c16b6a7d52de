/* The kernel's queue pairs from `rdma -j resource show qp`; see qp_kernel.h. */
#include "qp_kernel.h"

#include <ctype.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#define KQP_MAX_TEXT (64u << 20) /* more than any host's QPs print */

/* A JSON string at *p (just past its opening quote) into out, escapes
 * kept as the character after the backslash; *p ends past the closing
 * quote (or at end). */
static void read_string(const char **p, const char *end, char *out, size_t outlen)
{
	size_t n = 0;

	while (*p < end && **p != '"') {
		char c = **p;

		if (c == '\\' && *p + 1 < end)
			c = *++*p;
		if (n + 1 < outlen)
			out[n++] = c;
		++*p;
	}
	if (*p < end)
		++*p;
	if (outlen)
		out[n] = '\0';
}

static struct kqp *add(struct kqps *k)
{
	if (k->n == k->cap) {
		size_t cap = k->cap ? k->cap * 2 : 32;
		struct kqp *q = realloc(k->q, cap * sizeof(*q));

		if (!q)
			return NULL;
		k->q = q;
		k->cap = cap;
	}
	memset(&k->q[k->n], 0, sizeof(k->q[0]));
	k->q[k->n].port = k->q[k->n].lqpn = k->q[k->n].rqpn = k->q[k->n].pid = -1;
	k->q[k->n].sq_psn = k->q[k->n].rq_psn = -1;
	return &k->q[k->n++];
}

static void set(struct kqp *q, const char *key, const char *str, bool is_str, long long num)
{
	if (!strcmp(key, "ifname") && is_str)
		snprintf(q->dev, sizeof(q->dev), "%s", str);
	else if (!strcmp(key, "state") && is_str)
		snprintf(q->state, sizeof(q->state), "%s", str);
	else if (!strcmp(key, "comm") && is_str)
		snprintf(q->comm, sizeof(q->comm), "%s", str);
	else if (is_str)
		return;
	else if (!strcmp(key, "port"))
		q->port = (long)num;
	else if (!strcmp(key, "lqpn"))
		q->lqpn = (long)num;
	else if (!strcmp(key, "rqpn"))
		q->rqpn = (long)num;
	else if (!strcmp(key, "pid"))
		q->pid = (long)num;
	else if (!strcmp(key, "sq-psn"))
		q->sq_psn = num;
	else if (!strcmp(key, "rq-psn"))
		q->rq_psn = num;
}

/*
 * Every object ({...}) holding an "lqpn" is one QP, at whatever depth
 * (iproute2's layout has changed between versions). A key is a string
 * followed by ':'; its value a string, a number or anything else
 * (skipped).
 */
int kqp_parse(struct kqps *k, const char *text, size_t len)
{
	const char *p = text, *end = text + len;
	struct kqp *cur = NULL;
	char key[32], str[64];

	while (p < end) {
		char c = *p++;

		if (c == '{') {
			if (cur && cur->lqpn < 0)
				k->n--; /* an object without a QP in it */
			cur = add(k);
			if (!cur)
				return -ENOMEM;
		} else if (c == '}') {
			if (cur && cur->lqpn < 0)
				k->n--;
			cur = NULL;
		} else if (c == '"') {
			read_string(&p, end, key, sizeof(key));
			while (p < end && isspace((unsigned char)*p))
				p++;
			if (p >= end || *p != ':' || !cur)
				continue;
			p++;
			while (p < end && isspace((unsigned char)*p))
				p++;
			if (p < end && *p == '"') {
				p++;
				read_string(&p, end, str, sizeof(str));
				set(cur, key, str, true, 0);
			} else if (p < end && (isdigit((unsigned char)*p) || *p == '-')) {
				char num[24];
				size_t n = 0;

				while (p < end && n + 1 < sizeof(num) && (isdigit((unsigned char)*p) || *p == '-'))
					num[n++] = *p++;
				num[n] = '\0';
				set(cur, key, NULL, false, strtoll(num, NULL, 10));
			}
		}
	}
	if (cur && cur->lqpn < 0)
		k->n--;
	return 0;
}

static int parse_stream(struct kqps *k, FILE *f)
{
	size_t len = 0, cap = 0;
	char *buf = NULL;
	int rc;

	for (;;) {
		if (len == cap) {
			char *b = cap < KQP_MAX_TEXT ? realloc(buf, cap ? cap * 2 : 65536) : NULL;

			if (!b)
				break;
			buf = b;
			cap = cap ? cap * 2 : 65536;
		}
		size_t n = fread(buf + len, 1, cap - len, f);

		if (n == 0)
			break;
		len += n;
	}
	rc = kqp_parse(k, buf ? buf : "", len);
	free(buf);
	return rc;
}

int kqp_from_tool(struct kqps *k)
{
	/* Bounded: a hung netlink answer must not hang the command. */
	FILE *f = popen("timeout 5 rdma -j resource show qp 2>/dev/null", "r");
	int rc, st;

	if (!f)
		return -errno;
	rc = parse_stream(k, f);
	st = pclose(f);
	if (rc == 0 && (st == -1 || !WIFEXITED(st) || WEXITSTATUS(st) != 0))
		rc = -ENOENT;
	return rc;
}

int kqp_from_file(struct kqps *k, const char *path)
{
	FILE *f = strcmp(path, "-") ? fopen(path, "r") : stdin;
	int rc;

	if (!f)
		return -errno;
	rc = parse_stream(k, f);
	if (f != stdin)
		fclose(f);
	return rc;
}

const struct kqp *kqp_find(const struct kqps *k, const char *dev, uint32_t lqpn)
{
	for (size_t i = 0; i < k->n; i++)
		if (k->q[i].lqpn == (long)lqpn && !strcmp(k->q[i].dev, dev))
			return &k->q[i];
	return NULL;
}

void kqp_free(struct kqps *k)
{
	free(k->q);
	memset(k, 0, sizeof(*k));
}
