/*
 * Where the layers meet: the one place that hands a lower layer what the
 * higher ones do (conn's sock hooks, the transport registry). Called by the
 * constructor (init.c) before anything else of the shim runs, and by unit
 * tests that drive the core archive as the library would.
 */
#ifndef RDMASHIM_LAYERS_H
#define RDMASHIM_LAYERS_H

void shim_layers_register(void);

#endif
