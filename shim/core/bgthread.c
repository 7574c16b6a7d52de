/* The shim's own threads; see bgthread.h. */
#include "bgthread.h"

#include <pthread.h>
#include <signal.h>

int shim_bgthread_start(void *(*main_fn)(void *), void *arg)
{
	pthread_attr_t attr;
	pthread_t t;
	sigset_t all, old;
	int rc;

	rc = pthread_attr_init(&attr);
	if (rc)
		return -rc;
	pthread_attr_setdetachstate(&attr, PTHREAD_CREATE_DETACHED);
	sigfillset(&all);
	pthread_sigmask(SIG_SETMASK, &all, &old);
	rc = pthread_create(&t, &attr, main_fn, arg);
	pthread_sigmask(SIG_SETMASK, &old, NULL);
	pthread_attr_destroy(&attr);
	return -rc;
}
