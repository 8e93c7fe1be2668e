/*
 * increx.c: a test-only Redis module that registers an `INCREX` command.
 *
 * It stands in for the real INCREX command (Redis 8.8+, Valkey 9.2+) on the
 * servers older than 8.8 that we can run here (Redis 7.0 / 8.2, Valkey 8.1),
 * so that leasehold's INCREX fast path can be tested over a real connection.
 * It implements only the documented subset our code relies on
 * (see shared/reference/INCREX.md):
 *
 *   INCREX key [BYINT n] [LBOUND lo] [UBOUND hi]
 *              [PX ms | PXAT unix-ms | EX s | EXAT unix-s] [ENX]
 *
 *   - a missing key counts as 0, the default increment is 1;
 *   - if the result would leave [LBOUND, UBOUND] (or overflow a signed 64-bit
 *     integer) nothing happens (key not created, value and TTL untouched) and
 *     the reply is [current_value, 0];
 *   - otherwise the value is stored, the expiry applied (with ENX only when
 *     the key has no expiry yet) and the reply is [new_value, increment].
 * BYFLOAT, SATURATE, PERSIST and Valkey's NX/XX are not implemented: they get
 * `ERR syntax error`, so a test can never silently rely on them.
 *
 * Build: gcc -shared -fPIC -O2 -o increx.so increx.c
 * No redismodule.h is needed: we declare the handful of API entry points we
 * use and resolve them through GetApi, exactly as RedisModule_Init does.
 */
#include <limits.h>
#include <stddef.h>
#include <string.h>
#include <strings.h>

/* Constants copied from redismodule.h (stable since the module API's start). */
#define REDISMODULE_OK 0
#define REDISMODULE_ERR 1
#define REDISMODULE_APIVER_1 1
#define REDISMODULE_READ (1 << 0)
#define REDISMODULE_WRITE (1 << 1)
#define REDISMODULE_KEYTYPE_EMPTY 0
#define REDISMODULE_KEYTYPE_STRING 1
#define REDISMODULE_NO_EXPIRE -1

#define ERR_WRONGTYPE "WRONGTYPE Operation against a key holding the wrong kind of value"
#define ERR_NOT_INT "ERR value is not an integer or out of range"
#define ERR_SYNTAX "ERR syntax error"
#define ERR_EXPIRE "ERR invalid expire time in 'increx' command"

/* Opaque server types: we only ever pass pointers to them around. */
typedef struct RedisModuleCtx RedisModuleCtx;
typedef struct RedisModuleKey RedisModuleKey;
typedef struct RedisModuleString RedisModuleString;
typedef long long mstime_t;
typedef int (*RedisModuleCmdFunc)(RedisModuleCtx *ctx, RedisModuleString **argv, int argc);

/* The API functions we use, filled in by RedisModule_OnLoad via GetApi. */
static int (*RedisModule_GetApi)(const char *name, void *funcptr);
static int (*RedisModule_SetModuleAttribs)(RedisModuleCtx *ctx, const char *name, int ver, int apiver);
static int (*RedisModule_CreateCommand)(RedisModuleCtx *ctx, const char *name, RedisModuleCmdFunc cmdfunc,
                                        const char *strflags, int firstkey, int lastkey, int keystep);
static void (*RedisModule_AutoMemory)(RedisModuleCtx *ctx);
static int (*RedisModule_WrongArity)(RedisModuleCtx *ctx);
static int (*RedisModule_ReplyWithError)(RedisModuleCtx *ctx, const char *err);
static int (*RedisModule_ReplyWithArray)(RedisModuleCtx *ctx, long len);
static int (*RedisModule_ReplyWithLongLong)(RedisModuleCtx *ctx, long long ll);
static const char *(*RedisModule_StringPtrLen)(const RedisModuleString *str, size_t *len);
static int (*RedisModule_StringToLongLong)(const RedisModuleString *str, long long *ll);
static RedisModuleString *(*RedisModule_CreateString)(RedisModuleCtx *ctx, const char *ptr, size_t len);
static RedisModuleString *(*RedisModule_CreateStringFromLongLong)(RedisModuleCtx *ctx, long long ll);
static void *(*RedisModule_OpenKey)(RedisModuleCtx *ctx, RedisModuleString *keyname, int mode);
static int (*RedisModule_KeyType)(RedisModuleKey *key);
static char *(*RedisModule_StringDMA)(RedisModuleKey *key, size_t *len, int mode);
static int (*RedisModule_StringSet)(RedisModuleKey *key, RedisModuleString *str);
static mstime_t (*RedisModule_GetAbsExpire)(RedisModuleKey *key);
static int (*RedisModule_SetAbsExpire)(RedisModuleKey *key, mstime_t expire);
static long long (*RedisModule_Milliseconds)(void);
static int (*RedisModule_Replicate)(RedisModuleCtx *ctx, const char *cmdname, const char *fmt, ...);

/* Case-insensitive comparison of an argument with an option name, the way
 * Redis matches its own option keywords. */
static int arg_is(RedisModuleString *arg, const char *option) {
    size_t len;
    const char *s = RedisModule_StringPtrLen(arg, &len);
    return len == strlen(option) && strncasecmp(s, option, len) == 0;
}

static int increx_command(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    if (argc < 2) return RedisModule_WrongArity(ctx);
    /* Frees the key handle and the strings we create on every return path. */
    RedisModule_AutoMemory(ctx);

    long long by = 1, lo = LLONG_MIN, hi = LLONG_MAX;
    int have_by = 0, have_lo = 0, have_hi = 0, enx = 0;
    /* Absolute unix-ms expiry requested by PX/PXAT/EX/EXAT, if any. Computed
     * from the server clock up front so a bad value is rejected before we
     * touch the key, and so the same instant can be replicated. */
    long long expire_at = REDISMODULE_NO_EXPIRE;
    long long now = RedisModule_Milliseconds();

    for (int i = 2; i < argc; i++) {
        RedisModuleString *opt = argv[i];
        if (arg_is(opt, "ENX") && !enx) {
            enx = 1;
            continue;
        }
        /* Every other option takes exactly one integer argument. */
        if (i + 1 >= argc) return RedisModule_ReplyWithError(ctx, ERR_SYNTAX);
        long long v;
        int is_int = RedisModule_StringToLongLong(argv[i + 1], &v) == REDISMODULE_OK;
        long long *slot = NULL;
        int *seen = NULL;
        if (arg_is(opt, "BYINT")) slot = &by, seen = &have_by;
        else if (arg_is(opt, "LBOUND")) slot = &lo, seen = &have_lo;
        else if (arg_is(opt, "UBOUND")) slot = &hi, seen = &have_hi;

        if (slot) {
            /* A repeated option is ambiguous: refuse it like Redis' SET does. */
            if (*seen) return RedisModule_ReplyWithError(ctx, ERR_SYNTAX);
            if (!is_int) return RedisModule_ReplyWithError(ctx, ERR_NOT_INT);
            *slot = v;
            *seen = 1;
        } else {
            int relative = arg_is(opt, "PX") || arg_is(opt, "EX");
            int absolute = arg_is(opt, "PXAT") || arg_is(opt, "EXAT");
            /* Unknown option, or a second expiry option: syntax error. */
            if ((!relative && !absolute) || expire_at != REDISMODULE_NO_EXPIRE)
                return RedisModule_ReplyWithError(ctx, ERR_SYNTAX);
            if (!is_int) return RedisModule_ReplyWithError(ctx, ERR_NOT_INT);
            long long ms = v;
            int seconds = arg_is(opt, "EX") || arg_is(opt, "EXAT");
            /* Like SET: non-positive times and anything that overflows the
             * millisecond clock are refused. */
            if (v <= 0 || (seconds && __builtin_mul_overflow(v, 1000LL, &ms)) ||
                (relative && __builtin_add_overflow(ms, now, &ms)))
                return RedisModule_ReplyWithError(ctx, ERR_EXPIRE);
            expire_at = ms;
        }
        i++;
    }

    RedisModuleKey *key = RedisModule_OpenKey(ctx, argv[1], REDISMODULE_READ | REDISMODULE_WRITE);
    long long current = 0;
    int type = RedisModule_KeyType(key);
    if (type == REDISMODULE_KEYTYPE_STRING) {
        /* Parse with the server's own integer parser, so exactly the values
         * INCR accepts are accepted. (A READ DMA may re-encode an int-encoded
         * value as a raw string; the value itself is unchanged.) */
        size_t len;
        const char *buf = RedisModule_StringDMA(key, &len, REDISMODULE_READ);
        if (RedisModule_StringToLongLong(RedisModule_CreateString(ctx, buf, len), &current) != REDISMODULE_OK)
            return RedisModule_ReplyWithError(ctx, ERR_NOT_INT);
    } else if (type != REDISMODULE_KEYTYPE_EMPTY) {
        return RedisModule_ReplyWithError(ctx, ERR_WRONGTYPE);
    }

    long long next;
    if (__builtin_add_overflow(current, by, &next) || next < lo || next > hi) {
        /* Out of range: the contract is "skip", i.e. no write at all, which
         * is also why nothing is replicated here. */
        RedisModule_ReplyWithArray(ctx, 2);
        RedisModule_ReplyWithLongLong(ctx, current);
        return RedisModule_ReplyWithLongLong(ctx, 0);
    }

    /* StringSet replaces the value and drops any TTL (it deletes the old key),
     * so read the old expiry first and decide what the key ends up with. A new
     * key has no expiry, so ENX applies it. (GetAbsExpire is documented to
     * handle a missing key, but Redis 8.2 crashes on one: don't ask.) */
    long long old_expire_at = REDISMODULE_NO_EXPIRE;
    if (type != REDISMODULE_KEYTYPE_EMPTY) old_expire_at = RedisModule_GetAbsExpire(key);
    long long final_expire_at = old_expire_at;
    if (expire_at != REDISMODULE_NO_EXPIRE && !(enx && old_expire_at != REDISMODULE_NO_EXPIRE))
        final_expire_at = expire_at;

    RedisModule_StringSet(key, RedisModule_CreateStringFromLongLong(ctx, next));
    if (final_expire_at != REDISMODULE_NO_EXPIRE) RedisModule_SetAbsExpire(key, final_expire_at);

    /* Replicate the effect, not the command: replaying "PX ... ENX" on a
     * replica would compute its own deadline from its own clock. */
    RedisModuleString *value = RedisModule_CreateStringFromLongLong(ctx, next);
    if (final_expire_at != REDISMODULE_NO_EXPIRE)
        RedisModule_Replicate(ctx, "SET", "sscl", argv[1], value, "PXAT", final_expire_at);
    else
        RedisModule_Replicate(ctx, "SET", "ss", argv[1], value);

    RedisModule_ReplyWithArray(ctx, 2);
    RedisModule_ReplyWithLongLong(ctx, next);
    return RedisModule_ReplyWithLongLong(ctx, by);
}

/* Resolves one API entry point; a missing one fails the module load instead
 * of crashing on first use. */
#define GET_API(name)                                                                          \
    if (RedisModule_GetApi("RedisModule_" #name, (void *)&RedisModule_##name) != REDISMODULE_OK) \
        return REDISMODULE_ERR;

int RedisModule_OnLoad(RedisModuleCtx *ctx, RedisModuleString **argv, int argc) {
    (void)argv;
    (void)argc;
    /* The server puts its GetApi function in the first word of the context;
     * this is what redismodule.h's RedisModule_Init relies on too. */
    RedisModule_GetApi = (int (*)(const char *, void *))((void **)ctx)[0];
    GET_API(SetModuleAttribs);
    GET_API(CreateCommand);
    GET_API(AutoMemory);
    GET_API(WrongArity);
    GET_API(ReplyWithError);
    GET_API(ReplyWithArray);
    GET_API(ReplyWithLongLong);
    GET_API(StringPtrLen);
    GET_API(StringToLongLong);
    GET_API(CreateString);
    GET_API(CreateStringFromLongLong);
    GET_API(OpenKey);
    GET_API(KeyType);
    GET_API(StringDMA);
    GET_API(StringSet);
    GET_API(GetAbsExpire);
    GET_API(SetAbsExpire);
    GET_API(Milliseconds);
    GET_API(Replicate);

    RedisModule_SetModuleAttribs(ctx, "increx", 1, REDISMODULE_APIVER_1);
    /* Same flags as the real command (write, denyoom, fast); key at argv[1]. */
    return RedisModule_CreateCommand(ctx, "increx", increx_command, "write deny-oom fast", 1, 1, 1);
}
