/*
 * report.c - a store's error reporting: the detail of the last failure (file,
 * offset, what) for ember_error_detail and the log function, and what recovery
 * found (ember_recovery_info_get).
 */
#include "store/store_int.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

void db_report(struct ember_db *db, const char *fmt, ...)
{
	char line[256];
	va_list ap;
	va_start(ap, fmt);
	vsnprintf(line, sizeof(line), fmt, ap);
	va_end(ap);
	pthread_mutex_lock(&db->err_mu);
	memcpy(db->err_detail, line, sizeof(line));
	db->has_err = 1;
	pthread_mutex_unlock(&db->err_mu);
	if (db->opts.log_fn)
		db->opts.log_fn(db->opts.log_arg, line);
	else
		fprintf(stderr, "ember: %s\n", line);
}

int ember_error_detail(ember_db *db, char *buf, size_t cap)
{
	if (!db || db->magic != DB_MAGIC || !buf || !cap)
		return EMBER_EINVAL;
	pthread_mutex_lock(&db->err_mu);
	int has = db->has_err;
	if (has)
		snprintf(buf, cap, "%s", db->err_detail);
	pthread_mutex_unlock(&db->err_mu);
	if (!has) {
		buf[0] = '\0';
		return EMBER_ENOTFOUND;
	}
	return 0;
}

int ember_recovery_info_get(ember_db *db, ember_recovery_info *out)
{
	if (!db || db->magic != DB_MAGIC || !out)
		return EMBER_EINVAL;
	*out = db->recovery;
	return 0;
}
