// Ends what src/cpu/isa/prologue.hpp began: the last line of each source of src/cpu/isa/.
#pragma GCC pop_options
