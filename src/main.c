/*
** main.c -- the tilua program: runs kernel scripts like `lua`, is a REPL in
** which every lowering stage can be inspected, and transforms textual IR
** (`tilua opt`). Shaped after lua.c: main creates the state and runs a
** protected main with a traceback handler; the REPL itself lives in
** lua/tilua/host/repl.lua and reads lines through the host's readline.
*/
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <lauxlib.h>
#include <lua.h>
#include <lualib.h>

#include "lua/lbind.h"

#ifdef TILUA_USE_READLINE
#include <readline/history.h>
#include <readline/readline.h>
#endif

static const char *progname = "tilua";

static const char usage_text[] =
    "usage: %s [options] [script [args]]\n"
    "       %s opt FILE.tir [opt options]     transform textual IR (see 'tilua opt --help')\n"
    "       %s sched [sched options]          show which worker computes which tile (see 'tilua sched --help')\n"
    "Options:\n"
    "  -e stat   execute string 'stat'\n"
    "  -i        enter the REPL after running the script (or alone)\n"
    "  -l mod    require library 'mod' into global 'mod'\n"
    "  -v        show version information\n"
    "  -E        ignore environment variables (LUA_PATH, LUA_CPATH, TILUA_SOURCE_DIR)\n"
    "  --emit=ir|ptx  the script's first compile (k:compile, tl.compile) prints the final\n"
    "                 IR or the PTX and exits 0 without launching (also after the script);\n"
    "                 a script that compiles nothing is an error\n"
    "  --stage=NAME   likewise, printing the IR after pass NAME (or 'input', or a number)\n"
    "  --trace=FILE   write every stage of every compile of the script to FILE, one HTML\n"
    "                 page with the IR before and after each pass side by side\n"
    "  --debug-hangs  compile kernels so that an mbarrier wait gives up after 1 s and\n"
    "                 says which barrier, phase and warp; barrier waits are recorded\n"
    "  --check-protocol  check every compile's barrier protocols on the CPU emulator, on\n"
    "                 its input and after every pass that changes it (also\n"
    "                 TILUA_CHECK_PROTOCOL=1; =passes fails only where a pass broke\n"
    "                 a protocol that held; docs/protocol.md)\n"
    "  --help    show this help\n"
    "  --        stop handling options\n"
    "  -         run stdin as a script and stop handling options\n"
    "Without arguments: the REPL when stdin is a terminal, else run stdin as a script.\n"
    "Scripts see the library as `require \"tilua\"`; in the REPL it is also the global `tl`.\n"
    "REPL commands start with ':' (':help' lists them).\n"
    "Errors name the script line that caused them; set TILUA_TRACEBACK=1 for Lua tracebacks.\n";

static void print_usage(FILE *f) { fprintf(f, usage_text, progname, progname, progname); }

static void print_version(void) {
  printf("tilua 0.1.0 (%s) -- a GPU kernel compiler for Lua\n", LUA_RELEASE);
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
** Host functions for the Lua side (readline, isatty)
** ======================================================================= */

#ifdef TILUA_USE_READLINE
/* Ctrl-C while typing drops the line and gives a fresh prompt (as a shell
** does) instead of ending the session; Ctrl-C while a chunk runs interrupts
** it (laction). */
static void readline_sigint(int sig) {
  (void)sig;
  fputs("^C\n", stdout);
  rl_replace_line("", 0);
  rl_on_new_line();
  rl_redisplay();
}

/* The file history is kept in across sessions (host.history_file). */
static char *history_path = NULL;
#endif

/* host.readline(prompt) -> line | nil at end of input */
static int host_readline(lua_State *L) {
  const char *prompt = luaL_optstring(L, 1, "> ");
#ifdef TILUA_USE_READLINE
  if (isatty(0)) {
    signal(SIGINT, readline_sigint);
    char *line = readline(prompt);
    signal(SIGINT, laction); /* Ctrl-C while the line runs: interrupt it, every time */
    if (!line) return 0;
    lua_pushstring(L, line);
    free(line);
    return 1;
  }
#endif
  if (isatty(0)) {
    fputs(prompt, stdout);
    fflush(stdout);
  }
  luaL_Buffer b;
  luaL_buffinit(L, &b);
  int c, any = 0;
  while ((c = getchar()) != EOF && c != '\n') {
    luaL_addchar(&b, (char)c);
    any = 1;
  }
  if (c == EOF && !any) return 0;
  luaL_pushresult(&b);
  return 1;
}

static int host_add_history(lua_State *L) {
#ifdef TILUA_USE_READLINE
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
#ifdef TILUA_USE_READLINE
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

static int host_isatty(lua_State *L) {
  lua_pushboolean(L, isatty((int)luaL_optinteger(L, 1, 0)));
  return 1;
}

static const luaL_Reg host_functions[] = {{"readline", host_readline},
                                          {"add_history", host_add_history},
                                          {"history_file", host_history_file},
                                          {"isatty", host_isatty},
                                          {NULL, NULL}};

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

static int dochunk(lua_State *L, int status) {
  if (status == LUA_OK) status = docall(L, 0, 0);
  return report(L, status);
}

static int dostring(lua_State *L, const char *s, const char *name) {
  return dochunk(L, luaL_loadbuffer(L, s, strlen(s), name));
}

/* require 'mod' and store it in global 'mod' */
static int dolibrary(lua_State *L, const char *name) {
  lua_getglobal(L, "require");
  lua_pushstring(L, name);
  int status = docall(L, 1, 1);
  if (status == LUA_OK) lua_setglobal(L, name);
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
  int status = luaL_loadfile(L, fname);
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

/* --emit=..., --stage=..., --trace=..., --debug-hangs and --check-protocol: the
** host's options of the scripts' compiles, before the script or among its
** arguments; the field of tilua.host.cli.script_options's table each one sets. */
static const char *tl_option_field(const char *a) {
  static const struct {
    const char *flag, *field;
  } opts[] = {{"--emit=", "emit"},
              {"--stage=", "stage"},
              {"--trace=", "trace"},
              {"--debug-hangs", "debug_hangs"},
              {"--check-protocol", "check_protocol"}};
  for (size_t i = 0; i < sizeof opts / sizeof opts[0]; i++) {
    size_t n = strlen(opts[i].flag);
    if (opts[i].flag[n - 1] == '=' ? strncmp(a, opts[i].flag, n) == 0
                                   : strcmp(a, opts[i].flag) == 0)
      return opts[i].field;
  }
  return NULL;
}
static int is_tl_option(const char *a) { return tl_option_field(a) != NULL; }

/* Hand them to tilua.host.cli.script_options{emit =, stage =, debug_hangs =, ...}, which
** sets tl.options (debug_hangs, and the stage hook that prints what --emit and
** --stage ask for and exits). The script's own arguments keep them. */
static int set_script_options(lua_State *L, char **argv) {
  lua_createtable(L, 0, 5);
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
      if (argv[i][2] != '\0') return has_error;
      *first = i + 1;
      return args;
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

static int runargs(lua_State *L, char **argv, int n) {
  for (int i = 1; i < n; i++) {
    int option = argv[i][1];
    if (option == 'e' || option == 'l') {
      const char *extra = argv[i] + 2;
      if (*extra == '\0') extra = argv[++i];
      int status = option == 'e' ? dostring(L, extra, "=(command line)") : dolibrary(L, extra);
      if (status != LUA_OK) return 0;
    }
  }
  return 1;
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

static int pmain(lua_State *L) {
  MainArgs *ma = lua_touserdata(L, 1);
  int argc = ma->argc;
  char **argv = ma->argv;
  openlibs(L);
  /* Subcommands: tilua opt ..., tilua sched ... */
  if (argc >= 2 && (strcmp(argv[1], "opt") == 0 || strcmp(argv[1], "sched") == 0)) {
    createargtable(L, argv, argc, 1);
    ma->exit_code = run_module_function(L, "tilua.host.cli", argv[1], argv + 2, argc - 2);
    lua_pushboolean(L, 1);
    return 1;
  }
  int script;
  int args = collectargs(argv, &script);
  if (args == has_error) {
    fprintf(stderr, "%s: unrecognized option '%s'\n", progname, argv[script]);
    print_usage(stderr);
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
  if (args & has_E) {
    lua_pushboolean(L, 1);
    lua_setfield(L, LUA_REGISTRYINDEX, "LUA_NOENV");
  }
  createargtable(L, argv, argc, script);
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
      } else if (dochunk(L, luaL_loadfile(L, NULL)) != LUA_OK) {
        return 0;
      }
    }
  }
  lua_pushboolean(L, 1);
  return 1;
}

int main(int argc, char **argv) {
  lua_State *L = luaL_newstate();
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
  lua_close(L);
  if (stop_code >= 0) return stop_code;
  if (status != LUA_OK || !result) return EXIT_FAILURE;
  return ma.exit_code;
}

/* }====================================================================== */
