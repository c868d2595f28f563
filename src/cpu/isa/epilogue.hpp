// Ends what src/cpu/isa/prologue.hpp began: the last line of each source of src/cpu/isa/.
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
