/* Empty on purpose: LuaJIT's FFI knows the fixed-width integer types.
 * core/ffi/cdefs.cmake preprocesses the public headers against this stub so no
 * libc text leaks into the declarations. */
