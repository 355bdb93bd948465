// The text of aoti_compile.py (the inductor backend's compile step), embedded at build time
// so that a binary needs no runfiles to compile partitions: the backend writes it into its
// cache folder and runs it with the configured Python.
#ifndef MAGI_BACKEND_INDUCTOR_AOTI_COMPILE_SCRIPT_H_
#define MAGI_BACKEND_INDUCTOR_AOTI_COMPILE_SCRIPT_H_

namespace magi::inductor {

extern const char kAotiCompileScript[];

}  // namespace magi::inductor

#endif  // MAGI_BACKEND_INDUCTOR_AOTI_COMPILE_SCRIPT_H_
