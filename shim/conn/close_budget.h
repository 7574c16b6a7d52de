/*
 * What the program's closes may wait for peers' promises, per process
 * (close_budget.c).
 *
 * A close waits for frames the peer owes us (close.c): a bell it took an
 * arm of ours for, its SWITCH frame. A live peer keeps such a promise in
 * microseconds; a hostile one never does, and each of its connections
 * would cost the program's thread SHIM_CLOSE_WAIT_MS at its close, one
 * after another. So every close draws its wait from one budget of the
 * process: SHIM_CLOSE_WAIT_MS when full, refilled at 1/CLOSE_REFILL_DIV of
 * the time that passes. However many peers go silent at once, the program
 * waits for them SHIM_CLOSE_WAIT_MS in all, then at most 1/64 of its time
 * while the attack lasts. A close that finds the budget spent takes what
 * has come and goes on without waiting (traced close.budget_spent): a
 * frame that comes later makes the kernel reset the connection, as it
 * would for bytes reaching a closed socket.
 */
#ifndef RDMASHIM_CLOSE_BUDGET_H
#define RDMASHIM_CLOSE_BUDGET_H

#define CLOSE_REFILL_DIV 64ull

/* Takes up to want_ns of waiting from the budget at now_ns; returns what
 * was granted (0: spent). Lock-free: any thread, any lock held, and a
 * fork's child keeps the parent's state. */
unsigned long long shim_close_budget_take(unsigned long long want_ns, unsigned long long now_ns);
/* Gives back a grant's part that was not waited. */
void shim_close_budget_refund(unsigned long long unused_ns);

#endif
