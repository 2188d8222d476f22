/*
 * store.c - the store layer's types of ember._ember. Registers no type yet: the
 * module's init calls emb_store_init, which succeeds.
 */
#include "ember_py.h"

int emb_store_init(PyObject *module)
{
	(void)module;
	return 0;
}
