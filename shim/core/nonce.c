/* Batched secret random bytes; see nonce.h. */
#include "nonce.h"

#include <errno.h>
#include <pthread.h>
#include <string.h>
#include <sys/random.h>

#include "self.h"

/* 32 nonces of 16 bytes a draw. */
#define POOL_BYTES 512

static pthread_mutex_t pool_lock = PTHREAD_MUTEX_INITIALIZER;
static uint8_t pool[POOL_BYTES];
static size_t pool_left;     /* unused bytes, at the end of pool */
static pid_t pool_pid;       /* the process that drew them */

static int refill(void)
{
	ssize_t n = getrandom(pool, sizeof(pool), GRND_NONBLOCK);

	if (n != (ssize_t)sizeof(pool))
		return -EIO;
	pool_left = sizeof(pool);
	pool_pid = shim_self_pid();
	return 0;
}

int shim_nonce_draw(uint8_t *out, size_t len)
{
	int rc = 0;

	if (len > SHIM_NONCE_POOL_MAX)
		return -EINVAL;
	pthread_mutex_lock(&pool_lock);
	/* A fork child's copy of the pool is its parent's: never used. */
	if (pool_pid != shim_self_pid())
		pool_left = 0;
	if (pool_left < len)
		rc = refill();
	if (rc == 0) {
		uint8_t *from = pool + sizeof(pool) - pool_left;

		memcpy(out, from, len);
		/* Handed out once: nothing of it stays behind in the pool. */
		memset(from, 0, len);
		pool_left -= len;
	}
	pthread_mutex_unlock(&pool_lock);
	return rc;
}
