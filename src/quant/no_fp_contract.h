// Included last by every file that defines scalar reference kernels: turns floating-point
// contraction off for the rest of that file (reference_kernels.h says why).
#if defined(__clang__)
#pragma clang fp contract(off)
#else
#pragma GCC optimize("fp-contract=off")
#endif
