/* hello.c - open a store (argv[1], or /tmp/ember-demo), put a key, read it back,
 * checkpoint. */
#include <stdio.h>
#include <string.h>
#include <ember.h>

int main(int argc, char **argv)
{
	const char *dir = argc > 1 ? argv[1] : "/tmp/ember-demo";
	ember_options opts;
	ember_db *db = NULL;
	ember_session *s = NULL;
	char buf[64];
	size_t len = 0;
	int rc;

	ember_options_default(&opts);
	opts.log_memory = 64u << 20;        /* 64 MiB of in-memory log (fixed at creation) */
	opts.checkpoint_interval_ms = 1000; /* a checkpoint every second, in the background */

	rc = ember_open(dir, &opts, &db);
	if (rc < 0) {
		fprintf(stderr, "ember_open: %s\n", ember_strerror(rc));
		return 1;
	}
	rc = ember_session_open(db, &s);
	if (rc < 0)
		goto out;

	rc = ember_put(s, "hello", 5, "world", 5);
	if (rc < 0)
		goto out;

	rc = ember_get(s, "hello", 5, buf, sizeof(buf), &len);
	if (rc == 0)
		printf("hello -> %.*s\n", (int)len, buf);
	else if (rc == EMBER_ENOTFOUND)
		printf("hello is absent\n");

	/* durable from here on, whatever happens to the process */
	rc = ember_checkpoint(db, NULL);

out:
	if (rc < 0 && rc != EMBER_ENOTFOUND)
		fprintf(stderr, "ember: %s\n", ember_strerror(rc));
	ember_session_close(s);   /* accepts NULL */
	if (ember_close(db) < 0)  /* accepts NULL */
		rc = -1;
	return rc < 0 && rc != EMBER_ENOTFOUND ? 1 : 0;
}
