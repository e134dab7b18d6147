-- Declarations of core/include/dsh/envd_events.h for ffi.cdef.
return [[
typedef struct dsh_envd_events dsh_envd_events_t;
enum { DSH_ENVD_MESSAGE = 1, DSH_ENVD_DATA = 2, DSH_ENVD_END = 3 };
typedef struct dsh_envd_event {
  int32_t kind; int32_t stream; int64_t offset; const uint8_t *data; size_t len;
} dsh_envd_event_t;
int dsh_envd_events_new(uint32_t max_message_bytes, dsh_envd_events_t **out);
void dsh_envd_events_free(dsh_envd_events_t *e);
int dsh_envd_events_push(dsh_envd_events_t *e, const uint8_t *data, size_t n);
int dsh_envd_events_next(dsh_envd_events_t *e, dsh_envd_event_t *ev);
int dsh_envd_events_finish(dsh_envd_events_t *e);
const char *dsh_envd_events_error(const dsh_envd_events_t *e);
]]
