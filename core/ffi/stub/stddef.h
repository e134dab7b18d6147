/* Empty on purpose: LuaJIT's FFI knows size_t and friends. core/ffi/cdefs.cmake
 * preprocesses the public headers against this stub so no libc text leaks
 * into the declarations. */
