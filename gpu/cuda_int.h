/*
 * cuda_int.h - what the CUDA backend's two files (cuda_runtime.cu, cuda_kernels.cu)
 * share: the error mapping, EGC_TRY, and egc_scope, which runs a call on Ember's
 * device without changing the caller's current device. C++ (nvcc) only.
 *
 * The current device
 * ------------------
 * The CUDA runtime works on the driver context current to the calling thread;
 * cudaSetDevice makes a device's primary context current and leaves it so. A
 * trainer thread that calls Ember must find its own device current afterwards, or
 * its next allocations and launches go to Ember's device. So no egc_* call uses
 * cudaSetDevice: egc_scope reads the thread's current context (cuCtxGetCurrent);
 * if it is not Ember's device's primary context, it pushes that one
 * (cuCtxPushCurrent) and pops it again when the scope ends. The thread's context
 * stack, and the runtime's record of the thread's device, are then exactly as the
 * caller left them, including "no context at all" (a thread that never used CUDA
 * gets no context on device 0 from Ember either). The runtime uses a pushed
 * primary context as if cudaSetDevice had selected its device.
 *
 * The driver calls come from cudaGetDriverEntryPointByVersion, so libember needs
 * no link with libcuda (it still loads on machines with no driver).
 */
#ifndef EMBER_GPU_CUDA_INT_H
#define EMBER_GPU_CUDA_INT_H

#include <cuda.h>
#include <cudaTypedefs.h> /* PFN_cu*: the driver calls, fetched at run time */
#include <cuda_runtime.h>

#include <ember.h>

#include "backend.h"

int egc_map_error(cudaError_t e);

/* Map e and record the detail (what failed, the CUDA error's name and text). */
int egc_fail(cudaError_t e, const char *what);

/* On failure: reset the thread's last-error state too (a non-sticky error, e.g. a
 * failed cudaMalloc, would otherwise be reported again by the next launch's
 * cudaGetLastError), record the detail, then return the mapped code. */
#define EGC_TRY(expr)                                                               \
	do {                                                                        \
		cudaError_t egc_e_ = (expr);                                        \
		if (egc_e_ != cudaSuccess) {                                        \
			(void)cudaGetLastError();                                   \
			return egc_fail(egc_e_, #expr);                             \
		}                                                                   \
	} while (0)

/* Makes d's primary context current for the scope's lifetime (see above). */
class egc_scope {
public:
	explicit egc_scope(const eg_dev *d);
	~egc_scope();
	egc_scope(const egc_scope &) = delete;
	egc_scope &operator=(const egc_scope &) = delete;
	/* 0, or the EMBER_E* code of a failed switch (the call must not go on). */
	int status() const { return rc_; }

private:
	bool pushed_ = false;
	int rc_ = 0;
};

/* First statement of every egc_* call that touches the device. */
#define EGC_ENTER(d)                                                                \
	egc_scope egc_scope_(d);                                                    \
	do {                                                                        \
		if (egc_scope_.status() < 0)                                        \
			return egc_scope_.status();                                 \
	} while (0)

#endif
