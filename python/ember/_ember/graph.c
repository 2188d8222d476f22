/*
 * graph.c - the graph layer's types of ember._ember. Registers no type yet: the
 * module's init calls emb_graph_init, which succeeds.
 */
#include "ember_py.h"

int emb_graph_init(PyObject *module)
{
	(void)module;
	return 0;
}
