/* Names and texts of the reason codes; see reason.h. */
#include "reason.h"

static const char *const reason_names[] = {
#define SHIM_REASON_NAME(id, name, text) name,
	SHIM_REASONS(SHIM_REASON_NAME)
#undef SHIM_REASON_NAME
};

static const char *const reason_texts[] = {
#define SHIM_REASON_TEXT(id, name, text) text,
	SHIM_REASONS(SHIM_REASON_TEXT)
#undef SHIM_REASON_TEXT
};

_Static_assert(sizeof(reason_names) / sizeof(reason_names[0]) == SHIM_REASON_COUNT,
	       "one name per reason");

const char *shim_reason_name(enum shim_reason reason)
{
	return (unsigned)reason < SHIM_REASON_COUNT ? reason_names[reason] : "unknown";
}

const char *shim_reason_text(enum shim_reason reason)
{
	return (unsigned)reason < SHIM_REASON_COUNT ? reason_texts[reason] : "unknown reason";
}
