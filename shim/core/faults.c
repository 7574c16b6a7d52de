/* Test-only fault injection; see faults.h for the contract. */
#include "faults.h"

#include <ctype.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <string.h>
#include <time.h>

static const char *const kind_names[SHIM_FAULT_KINDS] = {
	[SHIM_FAULT_RING_ALLOC] = "ring_alloc",   [SHIM_FAULT_BELL_LOSS] = "bell_loss",
	[SHIM_FAULT_PEER_STALL] = "peer_stall",   [SHIM_FAULT_VERIFY_FAIL] = "verify_fail",
	[SHIM_FAULT_RV_SILENT] = "rv_silent",     [SHIM_FAULT_SWITCH_LATE] = "switch_late",
	[SHIM_FAULT_STAT_KILL] = "stat_kill",
	[SHIM_FAULT_CM_TIMEOUT] = "cm_timeout",   [SHIM_FAULT_CM_REJECT] = "cm_reject",
	[SHIM_FAULT_QP_ERROR] = "qp_error",       [SHIM_FAULT_CQ_LOST] = "cq_lost",
	[SHIM_FAULT_REG_FAIL] = "reg_fail",       [SHIM_FAULT_LINK_QP_LOST] = "link_qp_lost",
	[SHIM_FAULT_CQ_STALL] = "cq_stall",
};

unsigned shim_faults_armed;
static struct shim_fault_plan plan_armed;
/* Occurrences seen of each kind, and strikes made. */
static uint64_t seen[SHIM_FAULT_KINDS];
static unsigned long injected[SHIM_FAULT_KINDS];

const char *shim_fault_name(enum shim_fault_kind kind)
{
	return (unsigned)kind < SHIM_FAULT_KINDS ? kind_names[kind] : "?";
}

static const char *faults_skip_blanks(const char *s)
{
	while (*s == ' ' || *s == '\t')
		s++;
	return s;
}

/* The clause quotes at most a short piece of the value (QUOTE_MAX): the
 * line on stderr names the whole of it already. */
#define QUOTE_MAX 32
#define QUOTE(len) ((int)((len) > QUOTE_MAX ? QUOTE_MAX : (len)))

static int faults_refuse(struct shim_fault_plan *plan, int rc, char *why, size_t whylen, const char *fmt, ...)
	__attribute__((format(printf, 5, 6)));

static int faults_refuse(struct shim_fault_plan *plan, int rc, char *why, size_t whylen, const char *fmt, ...)
{
	va_list ap;

	if (whylen) {
		va_start(ap, fmt);
		vsnprintf(why, whylen, fmt, ap);
		va_end(ap);
	}
	memset(plan, 0, sizeof(*plan));
	return rc;
}

int shim_faults_parse(const char *text, struct shim_fault_plan *plan, char *why, size_t whylen)
{
	const char *p = text ? faults_skip_blanks(text) : "";

	memset(plan, 0, sizeof(*plan));
	if (whylen)
		why[0] = '\0';
	if (!*p)
		return 0;
	for (;;) {
		size_t len = strcspn(p, "@, \t");
		int kind = -1;
		uint64_t n = 0;

		for (unsigned k = 0; k < SHIM_FAULT_KINDS; k++)
			if (strlen(kind_names[k]) == len && strncmp(p, kind_names[k], len) == 0)
				kind = (int)k;
		if (!len)
			return faults_refuse(plan, -EINVAL, why, whylen, "expected KIND@N at '%.*s'",
					     QUOTE(strlen(p)), p);
		if (kind < 0)
			return faults_refuse(plan, -EINVAL, why, whylen,
					     "unknown kind '%.*s'; kinds: ring_alloc, bell_loss, peer_stall, "
					     "verify_fail, rv_silent, switch_late, stat_kill, cm_timeout, cm_reject, "
					     "qp_error, cq_lost, reg_fail, link_qp_lost, cq_stall",
					     QUOTE(len), p);
		const char *name = p;

		p = faults_skip_blanks(p + len);
		if (*p != '@')
			return faults_refuse(plan, -EINVAL, why, whylen, "expected @N after '%.*s'", QUOTE(len),
					     name);
		p = faults_skip_blanks(p + 1);
		if (!isdigit((unsigned char)*p))
			return faults_refuse(plan, -EINVAL, why, whylen, "expected a count N after '%.*s@'",
					     QUOTE(len), name);
		while (isdigit((unsigned char)*p)) {
			uint64_t digit = (uint64_t)(*p - '0');

			/* Checked before each digit is taken in, so n never
			 * wraps (2^64 would read as 0). */
			if (n > (SHIM_FAULT_N_MAX - digit) / 10)
				return faults_refuse(plan, -ERANGE, why, whylen, "N of '%.*s' past %llu",
						     QUOTE(len), name, (unsigned long long)SHIM_FAULT_N_MAX);
			n = n * 10 + digit;
			p++;
		}
		if (n == 0)
			return faults_refuse(plan, -ERANGE, why, whylen,
					     "N of '%.*s' is 0; the first attempt is 1", QUOTE(len), name);
		if (plan->count == SHIM_FAULTS_MAX)
			return faults_refuse(plan, -EINVAL, why, whylen, "more than %d faults", SHIM_FAULTS_MAX);
		plan->e[plan->count].kind = (enum shim_fault_kind)kind;
		plan->e[plan->count].n = n;
		plan->count++;
		p = faults_skip_blanks(p);
		if (*p == '\0')
			return 0;
		if (*p != ',')
			return faults_refuse(plan, -EINVAL, why, whylen, "expected ',' or the end at '%.*s'",
					     QUOTE(strlen(p)), p);
		p = faults_skip_blanks(p + 1);
	}
}

void shim_faults_arm(const struct shim_fault_plan *plan)
{
	unsigned armed = 0;

	plan_armed = *plan;
	for (unsigned k = 0; k < SHIM_FAULT_KINDS; k++) {
		__atomic_store_n(&seen[k], 0, __ATOMIC_RELAXED);
		__atomic_store_n(&injected[k], 0, __ATOMIC_RELAXED);
	}
	for (unsigned i = 0; i < plan->count; i++)
		armed |= 1u << plan->e[i].kind;
	/* Relaxed, as the sites' load (faults.h, shim_fault_hit): the plan is
	 * armed in the constructor, before the program starts a thread, and
	 * pthread_create orders it before everything that thread does; the
	 * unit tests re-arm between their threads the same way. */
	__atomic_store_n(&shim_faults_armed, armed, __ATOMIC_RELAXED);
}

uint64_t shim_fault_strike(enum shim_fault_kind kind)
{
	uint64_t n = __atomic_add_fetch(&seen[kind], 1, __ATOMIC_RELAXED);
	bool hit = false;

	for (unsigned i = 0; i < plan_armed.count && !hit; i++)
		hit = plan_armed.e[i].kind == kind && plan_armed.e[i].n == n;
	if (!hit)
		return 0;
	__atomic_add_fetch(&injected[kind], 1, __ATOMIC_RELAXED);
	return n;
}

uint64_t shim_fault_strike_bytes(enum shim_fault_kind kind, uint64_t len)
{
	uint64_t after = __atomic_add_fetch(&seen[kind], len, __ATOMIC_RELAXED), before = after - len;
	uint64_t hit = 0;

	/* The add makes each post's range its own, so two threads never both
	 * take one offset. */
	for (unsigned i = 0; i < plan_armed.count && !hit; i++)
		if (plan_armed.e[i].kind == kind && plan_armed.e[i].n > before && plan_armed.e[i].n <= after)
			hit = plan_armed.e[i].n;
	if (hit)
		__atomic_add_fetch(&injected[kind], 1, __ATOMIC_RELAXED);
	return hit;
}

void shim_fault_sleep_ms(unsigned ms)
{
	struct timespec ts = { .tv_sec = ms / 1000, .tv_nsec = (long)(ms % 1000) * 1000000L };
	int saved = errno;

	/* A signal cuts the sleep short; the rest is slept, as the fault
	 * promises its length. The program's errno is its own. */
	while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
		;
	errno = saved;
}

unsigned long shim_faults_injected(enum shim_fault_kind kind)
{
	return (unsigned)kind < SHIM_FAULT_KINDS ? __atomic_load_n(&injected[kind], __ATOMIC_RELAXED) : 0;
}
