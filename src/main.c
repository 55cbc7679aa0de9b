/*
** main.c -- the tilua program: runs kernel scripts like `lua`, is a REPL in
** which every lowering stage can be inspected, and transforms textual IR
** (`tilua opt`). Shaped after lua.c: main creates the state and runs a
** protected main with a traceback handler; the REPL itself lives in
** lua/tilua/host/repl.lua and reads lines through the host's readline.
*/
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/select.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lua/lbind.h"
#include "tilua.h"

static const char *progname = "tilua";

#define LUA_INIT_VAR "LUA_INIT"
#define LUA_INITVARVERSION LUA_INIT_VAR LUA_VERSUFFIX /* LUA_INIT_5_4 */
#define LUA_IGMARK "-"                                /* -l mod-v2 sets the global mod */

static const char usage_text[] =
    "usage: %s [options] [script [args]]\n"
    "       %s opt FILE.tir [opt options]     transform textual IR (see 'tilua opt --help')\n"
    "       %s sched [sched options]          show which worker computes which tile (see 'tilua sched --help')\n"
    "       %s export -o DIR [--no-cubin] script [args]\n"
    "                                         run the script, then write every kernel it compiled as C\n"
    "                                         for a host without Lua (docs/embedding.md)\n"
    "Options:\n"
    "  -e stat   execute string 'stat'\n"
    "  -i        enter the REPL after running the script (or alone)\n"
    "  -l mod    require library 'mod' into global 'mod'\n"
    "  -l g=mod  require library 'mod' into global 'g'\n"
    "  -v, --version  show version information\n"
    "  -E        ignore environment variables (LUA_INIT, LUA_PATH, LUA_CPATH, TILUA_SOURCE_DIR)\n"
    "  -W        turn warnings on\n"
    "  --emit=ir|ptx  the script's first compile (k:compile, tl.compile) prints the final\n"
    "                 IR or the PTX on stdout (the script's own output goes to stderr) and\n"
    "                 exits 0 without launching; a script that compiles nothing gets the\n"
    "                 kernels it built compiled; one that built none is an error\n"
    "  --stage=NAME   likewise, printing the IR after pass NAME (or 'input', or a number);\n"
    "                 of a compile that failed, the stage if it got there, then exit 1\n"
    "  --trace=FILE   write every stage of every compile of the script to FILE, one HTML\n"
    "                 page with the IR before and after each pass side by side, each op\n"
    "                 linked to its script line, a failed compile's stage marked\n"
    "  --debug-hangs  compile kernels so that an mbarrier wait gives up after 1 s and\n"
    "                 says which barrier, phase and warp; barrier waits are recorded\n"
    "  --check-protocol  check every compile's barrier protocols on the CPU emulator, on\n"
    "                 its input and after every pass that changes it (also\n"
    "                 TILUA_CHECK_PROTOCOL=1; =passes fails only where a pass broke\n"
    "                 a protocol that held; docs/protocol.md). Without it every\n"
    "                 compile checks the kernel as written, within a budget of\n"
    "                 emulator work a kernel (about 0.5 s; tl.options.check_protocol_work)\n"
    "  --no-check-protocol  no protocol check at all (also TILUA_CHECK_PROTOCOL=0)\n"
    "  --emulate      run every launch on the CPU emulator instead of a GPU (also\n"
    "                 TILUA_EMULATE=1): device buffers live in host memory, and the\n"
    "                 examples pick small problems\n"
    "  --timeline=FILE  draw which warp waits on which barrier or pipeline stage when, in\n"
    "                 every launch on the CPU emulator, as one HTML page (implies --emulate)\n"
    "  --help    show this help\n"
    "  --        stop handling options\n"
    "  -         run stdin as a script and stop handling options\n"
    "Without arguments: the REPL when stdin is a terminal, else run stdin as a script.\n"
    "Scripts see the library as `require \"tilua\"`; in the REPL it is also the global `tl`.\n"
    "REPL commands start with ':' (':help' lists them).\n"
    "Errors name the script line that caused them (TILUA_TRACEBACK=1: Lua tracebacks).\n"
    "Environment (docs/environment.md has every variable, the tests' too):\n"
    "  LUA_INIT_5_4, LUA_INIT  a chunk (or @file) run first, as in lua\n"
    "  TILUA_EMULATE=1         as --emulate\n"
    "  TILUA_CHECK_PROTOCOL=1|passes  as --check-protocol (TILUA_SKIP_CHECK_PROTOCOL=1\n"
    "                          ignores it; TILUA_CHECK_PROTOCOL_LOG=FILE logs each check)\n"
    "  TILUA_COMPILE_CHECK_LOG=FILE  a line per kernel the default compile check checks\n"
    "  TILUA_DUMP=1|all|a,b    every compile's input, IR after each pass (or the stages\n"
    "                          named: pass names, input, ptx) and PTX, to stderr\n"
    "  TILUA_DUMP_DIR=DIR      the same as files, DIR/NNNN-KERNEL/SS-STAGE.tir\n"
    "  TILUA_TRACEBACK=1       errors with a Lua traceback\n"
    "  TILUA_HISTORY=FILE      the REPL's history (default ~/.tilua_history; empty: none)\n"
    "  TILUA_PTXAS=PATH        the ptxas of tl.ptxas (default /usr/local/cuda/bin/ptxas)\n"
    "  TILUA_LIBCUDA=PATH      the CUDA driver library (default libcuda.so.1)\n"
    "  TILUA_DEVICE=N          the GPU ordinal (default 0)\n"
    "  TILUA_LAUNCH_TIMEOUT=S  seconds before a launch is reported hung (default 10)\n"
    "  TILUA_LAUNCH_CHECK=each check every launch for failure (default: every 32)\n"
    "  TILUA_LUA_PEEK=0        launches read Lua values through its API only (slower)\n"
    "  TILUA_CUBLASLT=PATH     the cuBLASLt library tl.gemm's check compares with\n"
    "  TILUA_NCCL=PATH         the NCCL library of tl.nccl (default libnccl.so.2);\n"
    "                          TILUA_NCCL_ID, TILUA_NCCL_RANK, TILUA_NCCL_NRANKS are set\n"
    "                          by tl.nccl.ranks for the processes it starts\n"
    "  TILUA_NO_GPU_EXIT=N     the exit code of a script stopped for want of a GPU\n"
    "  TILUA_AUTOTUNE=0        tl.autotune neither reads nor writes its cache;\n"
    "  TILUA_AUTOTUNE_CACHE=FILE  its cache file\n"
    "  TILUA_SEED=N, TILUA_SMALL=1  the examples' random seed; small problems\n"
    "  TILUA_SOURCE_DIR=DIR    load the Lua half from a source tree (not with -E)\n";

static void print_usage(FILE *f) { fprintf(f, usage_text, progname, progname, progname, progname); }

static void print_version(void) {
  printf("tilua " TILUA_VERSION " (%s) -- a GPU kernel compiler for Lua\n", LUA_RELEASE);
  fflush(stdout);
}

/* {======================================================================
** Error reporting and protected calls (as in lua.c)
** ======================================================================= */

static lua_State *globalL = NULL;

static void lstop(lua_State *L, lua_Debug *ar) {
  (void)ar;
  lua_sethook(L, NULL, 0, 0);
  luaL_error(L, "interrupted!");
}

static void laction(int i) {
  signal(i, SIG_DFL);
  lua_sethook(globalL, lstop, LUA_MASKCALL | LUA_MASKRET | LUA_MASKCOUNT, 1);
}

static void l_message(const char *msg) {
  fprintf(stderr, "%s: %s\n", progname, msg);
  fflush(stderr);
}

/* The exit code a script asked for with tl.stop (-1: none). */
static int stop_code = -1;

/* Is the error object at idx a stop ({exit_code = n, message = s}, tl.stop)? */
static int is_stop(lua_State *L, int idx) {
  if (!lua_istable(L, idx)) return 0;
  int isint = lua_getfield(L, idx, "exit_code") == LUA_TNUMBER && lua_isinteger(L, -1);
  lua_pop(L, 1);
  return isint;
}

/* A stop ends the program with its code, its message on stdout. */
static void take_stop(lua_State *L, int idx) {
  idx = lua_absindex(L, idx);
  lua_getfield(L, idx, "exit_code");
  stop_code = (int)lua_tointeger(L, -1);
  lua_getfield(L, idx, "message");
  if (lua_isstring(L, -1)) printf("%s\n", lua_tostring(L, -1));
  fflush(stdout);
  lua_pop(L, 2);
}

static int report(lua_State *L, int status) {
  if (status != LUA_OK && is_stop(L, -1)) {
    take_stop(L, -1);
    lua_pop(L, 1);
  } else if (status != LUA_OK) {
    const char *msg = lua_tostring(L, -1);
    if (!msg) msg = "(error object is not a string)";
    l_message(msg);
    lua_pop(L, 1);
  }
  return status;
}

/* Message handler: adds a traceback, except for errors raised by the tilua
** library at the user's line, whose message already says where. */
static int msghandler(lua_State *L) {
  if (is_stop(L, 1)) return 1; /* as it is: report() reads its code */
  lb_locate_error(L, 1);       /* an error inside the library: at the script's line */
  const char *msg = lua_tostring(L, 1);
  if (msg == NULL) {
    if (luaL_callmeta(L, 1, "__tostring") && lua_type(L, -1) == LUA_TSTRING) return 1;
    msg = lua_pushfstring(L, "(error object is a %s value)", luaL_typename(L, 1));
  }
  if (getenv("TILUA_TRACEBACK")) luaL_traceback(L, L, msg, 1);
  else lua_pushstring(L, msg);
  return 1;
}

static int docall(lua_State *L, int narg, int nres) {
  int base = lua_gettop(L) - narg;
  lua_pushcfunction(L, msghandler);
  lua_insert(L, base);
  globalL = L;
  signal(SIGINT, laction);
  int status = lua_pcall(L, narg, nres, base);
  signal(SIGINT, SIG_DFL);
  lua_remove(L, base);
  return status;
}

/* }====================================================================== */

/* {======================================================================
** Host functions for the Lua side (line editing, isatty)
**
** host.readline(prompt) -> line | nil at the end of input | false when Ctrl-C
** dropped the line being typed (the REPL then drops an unfinished chunk too).
** Line editing and history come from libedit (BSD; the default) or GNU
** readline (GPL-3, only when configured: TILUA_LINE_EDITING=readline), both
** through readline's callback interface so that Ctrl-C ends the wait for a
** line at once; without either, a terminal is read line by line.
** ======================================================================= */

#if defined(TILUA_USE_LIBEDIT)
#include <editline/readline.h>
#define TILUA_LINE_EDITOR 1
#elif defined(TILUA_USE_READLINE)
#include <readline/history.h>
#include <readline/readline.h>
#define TILUA_LINE_EDITOR 1
#endif

/* Set by Ctrl-C while the host waits for a line (never while a chunk runs:
** then laction interrupts it). */
static volatile sig_atomic_t line_interrupted = 0;

static void on_line_sigint(int sig) {
  (void)sig;
  line_interrupted = 1;
}

/* Waits for input on stdin with SIGINT blocked except inside the wait, so
** that a Ctrl-C at any moment ends it: 1 input is there, 0 Ctrl-C, -1 error. */
static int wait_input(const sigset_t *unblocked) {
  for (;;) {
    if (line_interrupted) return 0;
    fd_set in;
    FD_ZERO(&in);
    FD_SET(0, &in);
    int r = pselect(1, &in, NULL, NULL, NULL, unblocked);
    if (r > 0) return 1;
    if (r < 0 && errno != EINTR) return -1;
  }
}

#ifdef TILUA_LINE_EDITOR
static char *edited_line;
static int edited_done;

static void on_edited_line(char *line) {
  edited_line = line;
  edited_done = 1;
  rl_callback_handler_remove();
}

/* One line through the editor, as host.readline returns it (pushed: the line,
** false for Ctrl-C; nothing at the end of input): the number of results. */
static int read_terminal_line(lua_State *L, const char *prompt, const sigset_t *unblocked) {
  rl_catch_signals = 0; /* Ctrl-C is ours: the editor must not re-raise it */
  edited_line = NULL;
  edited_done = 0;
  rl_callback_handler_install(prompt, on_edited_line);
  while (!edited_done) {
    int r = wait_input(unblocked);
    if (r == 0) {
      rl_free_line_state();
#if defined(TILUA_USE_READLINE) && RL_READLINE_VERSION >= 0x0700
      rl_callback_sigcleanup();
#endif
      rl_cleanup_after_signal();
      rl_callback_handler_remove();
      fputs("^C\n", stdout);
      lua_pushboolean(L, 0);
      return 1;
    }
    if (r < 0) { /* stdin unusable: the end of input */
      rl_callback_handler_remove();
      break;
    }
    rl_callback_read_char();
  }
  if (!edited_line) return 0;
  lua_pushstring(L, edited_line);
  free(edited_line);
  return 1;
}

/* The file history is kept in across sessions (host.history_file). */
static char *history_path = NULL;

#else

/* One line of a terminal without an editor (the terminal echoes and edits it;
** read() gives a whole line). */
static int read_terminal_line(lua_State *L, const char *prompt, const sigset_t *unblocked) {
  fputs(prompt, stdout);
  fflush(stdout);
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int any = 0;
  for (;;) {
    int r = wait_input(unblocked);
    if (r == 0) {
      fputs("\n", stdout); /* the terminal echoed the ^C */
      lua_pushboolean(L, 0);
      return 1;
    }
    char buf[512];
    ssize_t n = r < 0 ? 0 : read(0, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) break;
    any = 1;
    if (buf[n - 1] == '\n') {
      luaL_addlstring(&b, buf, (size_t)n - 1);
      break;
    }
    luaL_addlstring(&b, buf, (size_t)n);
  }
  if (!any) return 0;
  luaL_pushresult(&b);
  return 1;
}
#endif

/* The longest line the REPL reads: an endless one (tilua -i < /dev/zero) is an
** error after that much, as in a bounded buffer, not a process that grows. */
#define MAX_LINE (1 << 20)

/* A line of a pipe or file: nil at the end of input; nil and a message past
** MAX_LINE bytes. */
static int read_plain_line(lua_State *L) {
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int c, any = 0;
  size_t n = 0;
  while ((c = getchar()) != EOF && c != '\n') {
    if (++n > MAX_LINE) {
      lua_pushnil(L);
      lua_pushfstring(L, "stdin: a line longer than %d bytes (the REPL reads at most that much)",
                      MAX_LINE);
      return 2;
    }
    luaL_addchar(&b, (char)c);
    any = 1;
  }
  if (c == EOF && !any) return 0;
  luaL_pushresult(&b);
  return 1;
}

/* host.readline(prompt) -> line | nil | false (see above) */
static int host_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
  if (!isatty(0)) return read_plain_line(L);
  struct sigaction sa;
  memset(&sa, 0, sizeof sa);
  sa.sa_handler = on_line_sigint; /* no SA_RESTART: the wait ends */
  sigemptyset(&sa.sa_mask);
  sigaction(SIGINT, &sa, NULL);
  line_interrupted = 0;
  sigset_t block, unblocked;
  sigemptyset(&block);
  sigaddset(&block, SIGINT);
  sigprocmask(SIG_BLOCK, &block, &unblocked);
  sigdelset(&unblocked, SIGINT);
  int n = read_terminal_line(L, prompt, &unblocked);
  fflush(stdout);
  signal(SIGINT, laction); /* Ctrl-C while the line runs: interrupt it, every time */
  sigprocmask(SIG_UNBLOCK, &block, NULL);
  return n;
}

static int host_add_history(lua_State *L) {
#ifdef TILUA_LINE_EDITOR
  const char *line = luaL_checkstring(L, 1);
  if (isatty(0) && *line) {
    add_history(line);
    if (history_path && append_history(1, history_path) == 0)
      history_truncate_file(history_path, 1000);
  }
#else
  (void)L;
#endif
  return 0;
}

/* host.history_file(path): read the history of earlier sessions from path and
** append each new line to it (a terminal session only). */
static int host_history_file(lua_State *L) {
#ifdef TILUA_LINE_EDITOR
  const char *path = luaL_checkstring(L, 1);
  if (!isatty(0)) return 0;
  free(history_path);
  history_path = strdup(path);
  if (read_history(history_path) != 0) { /* no file yet: make it, so append_history works */
    FILE *f = fopen(history_path, "a");
    if (f) fclose(f);
  }
#else
  (void)L;
#endif
  return 0;
}

/* A file handle of the program's own stdout, whose fclose the handle's
** __close / __gc calls (as liolib's). */
static int host_stream_close(lua_State *L) {
  luaL_Stream *p = (luaL_Stream *)luaL_checkudata(L, 1, LUA_FILEHANDLE);
  return luaL_fileresult(L, fclose(p->f) == 0, NULL);
}

/* host.take_stdout() -> file: what the program writes for its caller (the
** text of --emit and --stage) goes to the returned handle, the original
** stdout; everything else that would go to stdout (the script's print and
** io.write, messages) goes to stderr from now on. */
static int host_take_stdout(lua_State *L) {
  fflush(stdout);
  int fd = dup(1);
  FILE *f = fd >= 0 ? fdopen(fd, "w") : NULL;
  if (!f || dup2(2, 1) < 0) {
    if (fd >= 0) close(fd);
    return luaL_fileresult(L, 0, "stdout");
  }
  luaL_Stream *p = (luaL_Stream *)lua_newuserdatauv(L, sizeof(luaL_Stream), 0);
  p->closef = NULL; /* not a usable handle until f is in */
  luaL_setmetatable(L, LUA_FILEHANDLE);
  p->f = f;
  p->closef = host_stream_close;
  return 1;
}

static int host_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 0)));
  return 1;
}

static const luaL_Reg host_functions[] = {
    {"readline", host_readline},         {"add_history", host_add_history},
    {"history_file", host_history_file}, {"isatty", host_isatty},
    {"take_stdout", host_take_stdout},   {NULL, NULL}};

static int luaopen_tilua_host(lua_State *L) {
  luaL_newlib(L, host_functions);
  return 1;
}

/* }====================================================================== */

/* {======================================================================
** Running scripts and subcommands
** ======================================================================= */

/* Create the global 'arg' table: script name at 0, its arguments at 1.., options below 0. */
static void createargtable(lua_State *L, char **argv, int argc, int script) {
  if (script == argc) script = 0;
  int narg = argc - (script + 1);
  lua_createtable(L, narg, script + 1);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i - script);
  }
  lua_setglobal(L, "arg");
}

/* {=== scripts read in bounded pieces: an endless one (tilua - < /dev/zero, or
** `yes | tilua -`) is an error past MAX_SCRIPT bytes, not a process that grows */
#define MAX_SCRIPT ((size_t)256 << 20)

typedef struct ScriptReader {
  FILE *f;
  const char *name; /* for the message */
  size_t total;
  int first; /* a first line held back (the '#' line's newline), or EOF */
  char buf[BUFSIZ];
} ScriptReader;

static const char *read_script(lua_State *L, void *ud, size_t *size) {
  ScriptReader *r = ud;
  if (r->first != EOF) { /* the newline that ended a '#' line: keeps the line numbers */
    r->buf[0] = (char)r->first;
    r->first = EOF;
    *size = 1;
    return r->buf;
  }
  *size = feof(r->f) ? 0 : fread(r->buf, 1, sizeof r->buf, r->f);
  r->total += *size;
  if (r->total > MAX_SCRIPT)
    luaL_error(L, "%s: more than %d bytes of script (the most tilua reads)", r->name,
               (int)MAX_SCRIPT);
  return *size ? r->buf : NULL;
}

/* luaL_loadfile's work (stdin when fname is NULL; a first line starting with
** '#' skipped), in pieces, bounded by MAX_SCRIPT. */
static int load_script(lua_State *L, const char *fname) {
  ScriptReader r = {
      .f = fname ? fopen(fname, "rb") : stdin, .name = fname ? fname : "stdin", .first = EOF};
  if (!r.f) {
    lua_pushfstring(L, "cannot open %s: %s", fname, strerror(errno));
    return LUA_ERRFILE;
  }
  int c = getc(r.f);
  if (c == '#') { /* a Unix exec line */
    while ((c = getc(r.f)) != EOF && c != '\n') {
    }
    r.first = c == '\n' ? '\n' : EOF;
  } else if (c != EOF) {
    ungetc(c, r.f);
  }
  lua_pushfstring(L, fname ? "@%s" : "=stdin", fname);
  int status = lua_load(L, read_script, &r, lua_tostring(L, -1), NULL);
  lua_remove(L, -2); /* the chunk name */
  if (fname) fclose(r.f);
  return status;
}
/* }=== */

static int dochunk(lua_State *L, int status) {
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* -l g=mod: require 'mod' into global 'g'; -l mod: into global 'mod' (up to
** a '-': `-l mod-v2` sets 'mod'), as lua.c. */
static int dolibrary(lua_State *L, const char *arg) {
  const char *eq = strchr(arg, '=');
  const char *modname = eq ? eq + 1 : arg;
  size_t glen = eq ? (size_t)(eq - arg) : strcspn(arg, LUA_IGMARK);
  lua_getglobal(L, "require");
  lua_pushstring(L, modname);
  int status = docall(L, 1, 1);
  if (status == LUA_OK) {
    lua_pushlstring(L, arg, glen);
    lua_insert(L, -2);
    lua_setglobal(L, lua_tostring(L, -2));
    lua_pop(L, 1);
  }
  return report(L, status);
}

static int pushargs(lua_State *L) {
  if (lua_getglobal(L, "arg") != LUA_TTABLE) luaL_error(L, "'arg' is not a table");
  int n = (int)luaL_len(L, -1);
  luaL_checkstack(L, n + 3, "too many arguments to script");
  int i;
  for (i = 1; i <= n; i++)
    lua_rawgeti(L, -i, i);
  lua_remove(L, -i);
  return n;
}

static int handle_script(lua_State *L, char **argv) {
  const char *fname = argv[0];
  if (strcmp(fname, "-") == 0 && strcmp(argv[-1], "--") != 0) fname = NULL; /* stdin */
  int status = load_script(L, fname);
  if (status == LUA_OK) {
    int n = pushargs(L);
    status = docall(L, n, 0);
  }
  return report(L, status);
}

/* Run a function of a tilua Lua module with the remaining arguments:
** tilua.host.cli.<fn>(args...) */
static int run_module_function(lua_State *L, const char *module, const char *fn, char **argv,
                               int argc) {
  lua_getglobal(L, "require");
  lua_pushstring(L, module);
  int status = docall(L, 1, 1);
  if (status != LUA_OK) return report(L, status);
  lua_getfield(L, -1, fn);
  lua_remove(L, -2);
  lua_createtable(L, argc, 0);
  for (int i = 0; i < argc; i++) {
    lua_pushstring(L, argv[i]);
    lua_rawseti(L, -2, i + 1);
  }
  status = docall(L, 1, 1);
  if (status != LUA_OK) {
    report(L, status);
    return 1;
  }
  int code = lua_isinteger(L, -1) ? (int)lua_tointeger(L, -1) : 0;
  lua_pop(L, 1);
  return code;
}

#define has_error 1
#define has_i 2
#define has_v 4
#define has_e 8
#define has_E 16
#define has_help 32
#define has_W 64

/* tilua.host.cli.<fn>(the nargs values on top of the stack, which it pops); false
** after reporting an error. */
static int call_cli(lua_State *L, const char *fn, int nargs) {
  int base = lua_gettop(L) - nargs; /* the arguments: base + 1 .. top */
  lua_getglobal(L, "require");
  lua_pushliteral(L, "tilua.host.cli");
  int status = docall(L, 1, 1);
  if (status == LUA_OK) {
    lua_getfield(L, -1, fn);
    lua_remove(L, -2);
    lua_insert(L, base + 1); /* the function below its arguments */
    status = docall(L, nargs, 0);
  }
  report(L, status);
  lua_settop(L, base);
  return status == LUA_OK;
}

/* --emit=..., --stage=..., --trace=..., --debug-hangs, --check-protocol,
** --emulate and --timeline=...: the host's options of the scripts' compiles
** and launches, before the script or among its arguments; the field of
** tilua.host.cli.script_options's table each one sets. */
static const struct {
  const char *flag, *field;
} tl_options[] = {{"--emit=", "emit"},
                  {"--stage=", "stage"},
                  {"--trace=", "trace"},
                  {"--debug-hangs", "debug_hangs"},
                  {"--check-protocol", "check_protocol"},
                  {"--no-check-protocol", "no_check_protocol"},
                  {"--emulate", "emulate"},
                  {"--timeline=", "timeline"}};
#define N_TL_OPTIONS (sizeof tl_options / sizeof tl_options[0])

static const char *tl_option_field(const char *a) {
  for (size_t i = 0; i < N_TL_OPTIONS; i++) {
    const char *f = tl_options[i].flag;
    size_t n = strlen(f);
    if (f[n - 1] == '=' ? strncmp(a, f, n) == 0 : strcmp(a, f) == 0) return tl_options[i].field;
  }
  return NULL;
}
static int is_tl_option(const char *a) { return tl_option_field(a) != NULL; }

/* The long option nearest the unknown one a (up to its '='), or NULL. */
static const char *near_option(const char *a) {
  const char *names[N_TL_OPTIONS + 2];
  char buf[N_TL_OPTIONS][32];
  for (size_t i = 0; i < N_TL_OPTIONS; i++) {
    snprintf(buf[i], sizeof buf[i], "%s", tl_options[i].flag);
    buf[i][strcspn(buf[i], "=")] = '\0';
    names[i] = buf[i];
  }
  names[N_TL_OPTIONS] = "--help";
  names[N_TL_OPTIONS + 1] = "--version";
  const char *near = ir_closest_name(a, strcspn(a, "="), names, N_TL_OPTIONS + 2);
  if (!near) return NULL;
  for (size_t i = 0; i < N_TL_OPTIONS; i++) /* the flag as it is written: "--emit=" */
    if (near == names[i]) return tl_options[i].flag;
  return near;
}

/* Hand them to tilua.host.cli.script_options{emit =, stage =, debug_hangs =, ...}, which
** sets tl.options (debug_hangs, and the stage hook that prints what --emit and
** --stage ask for and exits). The script's own arguments keep them. */
static int set_script_options(lua_State *L, char **argv) {
  lua_createtable(L, 0, (int)N_TL_OPTIONS);
  for (int i = 1; argv[i] != NULL; i++) {
    if (!is_tl_option(argv[i])) continue;
    const char *eq = strchr(argv[i], '=');
    if (eq) lua_pushstring(L, eq + 1);
    else lua_pushboolean(L, 1);
    lua_setfield(L, -2, tl_option_field(argv[i]));
  }
  return call_cli(L, "script_options", 1);
}

/* After the script: tilua.host.cli.script_done() reports an --emit or --stage
** that no compile answered. */
static int script_done(lua_State *L) { return call_cli(L, "script_done", 0); }

/* Traverse options; returns the bitmask and sets *first to the script index. */
static int collectargs(char **argv, int *first) {
  int args = 0;
  int i;
  if (argv[0] != NULL) {
    if (argv[0][0]) progname = argv[0];
  } else {
    *first = -1;
    return 0;
  }
  for (i = 1; argv[i] != NULL; i++) {
    *first = i;
    if (argv[i][0] != '-') return args;
    if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) return args | has_help;
    switch (argv[i][1]) {
    case '-':
      if (is_tl_option(argv[i])) break;
      if (strcmp(argv[i], "--version") == 0) {
        args |= has_v;
        break;
      }
      if (argv[i][2] != '\0') return has_error;
      *first = i + 1;
      return args;
    case 'W':
      if (argv[i][2] != '\0') return has_error;
      args |= has_W;
      break;
    case '\0': return args;
    case 'E':
      if (argv[i][2] != '\0') return has_error;
      args |= has_E;
      break;
    case 'i':
      args |= has_i;
      if (argv[i][2] != '\0') return has_error;
      break;
    case 'v':
      if (argv[i][2] != '\0') return has_error;
      args |= has_v;
      break;
    case 'e': args |= has_e; /* fall through */
    case 'l':
      if (argv[i][2] == '\0') {
        i++;
        if (argv[i] == NULL || argv[i][0] == '-') return has_error;
      }
      break;
    default: return has_error;
    }
  }
  *first = i;
  return args;
}

/* -e, -l and -W in the order given (as lua.c). */
static int runargs(lua_State *L, char **argv, int n) {
  for (int i = 1; i < n; i++) {
    int option = argv[i][1];
    if (argv[i][0] != '-' || argv[i][1] == '-') continue;
    if (option == 'W') {
      lua_warning(L, "@on", 0);
    } else if (option == 'e' || option == 'l') {
      const char *extra = argv[i] + 2;
      if (*extra == '\0') extra = argv[++i];
      int status = option == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
      if (status != LUA_OK) return 0;
    }
  }
  return 1;
}

/* LUA_INIT_5_4, else LUA_INIT: a chunk to run first, or "@file" (lua.c). */
static int handle_luainit(lua_State *L) {
  const char *name = "=" LUA_INITVARVERSION;
  const char *init = getenv(name + 1);
  if (init == NULL) {
    name = "=" LUA_INIT_VAR;
    init = getenv(name + 1);
  }
  if (init == NULL) return LUA_OK;
  if (init[0] == '@') return dochunk(L, luaL_loadfile(L, init + 1));
  return dostring(L, init, name);
}

/* Standard libraries, then tilua (which installs the searcher of its Lua half). */
static void openlibs(lua_State *L) {
  luaL_openlibs(L);
  luaL_getsubtable(L, LUA_REGISTRYINDEX, LUA_PRELOAD_TABLE);
  lua_pushcfunction(L, luaopen_tilua_host);
  lua_setfield(L, -2, "tilua.host");
  lua_pop(L, 1);
  luaL_requiref(L, "tilua", luaopen_tilua, 0);
  lua_pop(L, 1);
}

/* Start the REPL (lua/tilua/host/repl.lua). */
static int doREPL(lua_State *L) {
  print_version();
  char *none[] = {NULL};
  return run_module_function(L, "tilua.host.repl", "run", none, 0);
}

typedef struct MainArgs {
  int argc;
  char **argv;
  int exit_code;
} MainArgs;

/* tilua export -o DIR [--no-cubin] script [args]: the script runs as `tilua
** script` would, every kernel it compiles recorded (tilua.host.cli.export_begin);
** then they are written as C (export_done). A stop (tl.stop, "SKIP: no GPU")
** ends the script, not the export; an error ends both. The exit code. */
#define export_usage "usage: %s export -o DIR [--no-cubin] script [args]   (docs/embedding.md)\n"
static int run_export(lua_State *L, int argc, char **argv) {
  const char *dir = NULL;
  int cubin = 1, i = 2;
  for (; i < argc && argv[i][0] == '-'; i++) {
    if (strcmp(argv[i], "-o") == 0 && i + 1 < argc) dir = argv[++i];
    else if (strcmp(argv[i], "--no-cubin") == 0) cubin = 0;
    else if (strcmp(argv[i], "--help") == 0) return printf(export_usage, progname), 0;
    else
      return fprintf(stderr, "%s export: unknown option '%s'\n" export_usage, progname, argv[i],
                     progname),
             1;
  }
  if (!dir || i >= argc)
    return fprintf(stderr, "%s export: needs -o DIR and a script\n" export_usage, progname,
                   progname),
           1;
  createargtable(L, argv, argc, i);
  lua_createtable(L, 0, 3);
  lua_pushstring(L, dir);
  lua_setfield(L, -2, "dir");
  lua_pushboolean(L, cubin);
  lua_setfield(L, -2, "cubin");
  lua_pushstring(L, argv[i]);
  lua_setfield(L, -2, "script");
  if (!call_cli(L, "export_begin", 1)) return 1;
  if (handle_script(L, argv + i) != LUA_OK && stop_code < 0) return 1;
  stop_code = -1;
  return call_cli(L, "export_done", 0) ? 0 : 1;
}

static int pmain(lua_State *L) {
  MainArgs *ma = lua_touserdata(L, 1);
  int argc = ma->argc;
  char **argv = ma->argv;
  /* Subcommands: tilua opt ..., tilua sched ... */
  if (argc >= 2 && (strcmp(argv[1], "opt") == 0 || strcmp(argv[1], "sched") == 0)) {
    openlibs(L);
    createargtable(L, argv, argc, 1);
    ma->exit_code = run_module_function(L, "tilua.host.cli", argv[1], argv + 2, argc - 2);
    lua_pushboolean(L, 1);
    return 1;
  }
  if (argc >= 2 && strcmp(argv[1], "export") == 0) {
    openlibs(L);
    ma->exit_code = run_export(L, argc, argv);
    lua_pushboolean(L, 1);
    return 1;
  }
  int script;
  int args = collectargs(argv, &script);
  if (args == has_error) {
    const char *near =
        argv[script][0] == '-' && argv[script][1] == '-' ? near_option(argv[script]) : NULL;
    fprintf(stderr, "%s: unrecognized option '%s'", progname, argv[script]);
    if (near) fprintf(stderr, "; did you mean '%s'?", near);
    fprintf(stderr, "\n('%s --help' lists the options)\n", progname);
    ma->exit_code = 1;
    lua_pushboolean(L, 1);
    return 1;
  }
  if (args & has_help) {
    print_usage(stdout);
    lua_pushboolean(L, 1);
    return 1;
  }
  if (args & has_v) print_version();
  if (args & has_E) { /* before the libraries: package reads LUA_PATH when it opens */
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  openlibs(L);
  createargtable(L, argv, argc, script);
  if (!(args & has_E) && handle_luainit(L) != LUA_OK) return 0;
  if (!set_script_options(L, argv)) return 0;
  if (!runargs(L, argv, script)) return 0;
  if (script > 0 && argv[script] != NULL) {
    int ok = handle_script(L, argv + script) == LUA_OK && script_done(L);
    if (!ok && !(args & has_i)) return 0;
    if (!ok) {
      /* -i: the REPL opens after the script's error or stop (tl.device.require without a GPU) */
      stop_code = -1;
      fputs("(the script ended early; the REPL has what it built)\n", stderr);
    }
  }
  if (args & has_i) {
    if (doREPL(L) != 0) return 0;
  } else if (script < 1 || argv[script] == NULL) {
    if (!(args & (has_e | has_v))) {
      if (isatty(0)) {
        if (doREPL(L) != 0) return 0;
      } else if (dochunk(L, load_script(L, NULL)) != LUA_OK) {
        return 0;
      }
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = lb_newstate();
  if (L == NULL) {
    l_message("cannot create state: not enough memory");
    return EXIT_FAILURE;
  }
  MainArgs ma = {argc, argv, 0};
  lua_pushcfunction(L, pmain);
  lua_pushlightuserdata(L, &ma);
  int status = lua_pcall(L, 1, 1, 0);
  int result = lua_toboolean(L, -1);
  report(L, status);
  lb_close(L);
  if (stop_code >= 0) return stop_code;
  if (status != LUA_OK || !result) return EXIT_FAILURE;
  return ma.exit_code;
}

/* }====================================================================== */
