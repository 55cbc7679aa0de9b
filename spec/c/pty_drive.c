/*
** pty_drive.c -- run a program on a pseudo-terminal and drive it from a
** script, as a user at a terminal would, deterministically: every keystroke
** is sent only after the output it answers has appeared (no sleeps).
**
**   pty_drive [-t SECONDS] SCRIPT PROGRAM [ARGS...]
**
** SCRIPT holds one step a line (text in C escapes: \n \r \t \\ \xHH, \003 ...):
**   send TEXT      write TEXT to the terminal (keys: "\r" is Enter, "\003" Ctrl-C,
**                  "\004" Ctrl-D at the start of a line)
**   expect TEXT    wait until the output, since the last match, holds TEXT;
**                  the output is read with terminal escapes and "\r" removed
**   absent TEXT    at the end: the whole output must not hold TEXT
**   exit N         at the end: the program must exit with status N
**   # ...          a comment (blank lines too)
** Each expect waits at most SECONDS (default 30). On a failure the driver
** prints the step and the output so far and exits 1; else it prints the
** output and exits 0. The program runs with TERM=dumb unless TERM is set.
*/
#define _GNU_SOURCE
#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct Out {
  char *text; /* everything the program wrote, escapes and \r removed */
  size_t n, cap;
  size_t from; /* the next expect searches from here */
  int esc;     /* inside a terminal escape: 0 no, 1 after ESC, 2 in CSI, 3 in OSC */
} Out;

static void die(const char *what) {
  perror(what);
  exit(2);
}

static void out_add(Out *o, char c) {
  if (o->n + 1 >= o->cap) {
    o->cap = o->cap ? 2 * o->cap : 4096;
    o->text = realloc(o->text, o->cap);
    if (!o->text) die("realloc");
  }
  o->text[o->n++] = c;
  o->text[o->n] = '\0';
}

/* Keep what a reader sees: drop ESC sequences (CSI ... final, OSC ... BEL or
** ESC \), carriage returns and the NUL padding some editors write. */
static void out_feed(Out *o, const char *buf, size_t n) {
  for (size_t i = 0; i < n; i++) {
    unsigned char c = (unsigned char)buf[i];
    switch (o->esc) {
    case 1: o->esc = c == '[' ? 2 : c == ']' ? 3 : 0; continue;
    case 2:
      if (c >= 0x40 && c <= 0x7e) o->esc = 0;
      continue;
    case 3:
      if (c == 7 || c == '\\') o->esc = 0;
      continue;
    default: break;
    }
    if (c == 27) o->esc = 1;
    else if (c != '\r' && c != 0) out_add(o, (char)c);
  }
}

/* C escapes of a script's TEXT into *len bytes (static buffer). */
static const char *unescape(const char *s, size_t *len) {
  static char buf[4096];
  size_t n = 0;
  while (*s && n < sizeof buf - 1) {
    if (*s != '\\' || !s[1]) {
      buf[n++] = *s++;
      continue;
    }
    s++;
    switch (*s) {
    case 'n':
      buf[n++] = '\n';
      s++;
      break;
    case 'r':
      buf[n++] = '\r';
      s++;
      break;
    case 't':
      buf[n++] = '\t';
      s++;
      break;
    case '\\':
      buf[n++] = '\\';
      s++;
      break;
    case 'x': { /* up to 2 hex digits */
      int v = 0, k = 0;
      for (s++; k < 2 && *s && strchr("0123456789abcdefABCDEF", *s); k++, s++)
        v = 16 * v + (*s <= '9' ? *s - '0' : (*s | 32) - 'a' + 10);
      buf[n++] = (char)v;
      break;
    }
    default:
      if (*s >= '0' && *s <= '7') { /* up to 3 octal digits */
        int v = 0;
        for (int k = 0; k < 3 && *s >= '0' && *s <= '7'; k++, s++)
          v = 8 * v + (*s - '0');
        buf[n++] = (char)v;
      } else {
        buf[n++] = *s++;
      }
    }
  }
  buf[n] = '\0';
  *len = n;
  return buf;
}

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

/* Read what the program wrote for up to `wait` seconds (0: only what is
** there); -1 once the terminal is closed (the program ended). */
static int pump(int fd, Out *o, double wait) {
  struct pollfd p = {fd, POLLIN, 0};
  int r = poll(&p, 1, (int)(wait * 1000));
  if (r < 0 && errno == EINTR) return 0;
  if (r <= 0) return 0;
  char buf[4096];
  ssize_t n = read(fd, buf, sizeof buf);
  if (n <= 0) return -1; /* EIO: the slave side is closed */
  out_feed(o, buf, (size_t)n);
  return 1;
}

static void fail(const char *script, int line, const char *why, Out *o) {
  fprintf(stderr, "pty_drive: %s:%d: %s\n--- output so far ---\n%s\n---\n", script, line, why,
          o->text ? o->text : "");
  exit(1);
}

int main(int argc, char **argv) {
  double timeout = 30;
  int a = 1;
  if (a + 1 < argc && strcmp(argv[a], "-t") == 0) {
    timeout = atof(argv[a + 1]);
    a += 2;
  }
  if (argc - a < 2) {
    fprintf(stderr, "usage: pty_drive [-t SECONDS] SCRIPT PROGRAM [ARGS...]\n");
    return 2;
  }
  const char *script = argv[a];
  FILE *sf = fopen(script, "r");
  if (!sf) die(script);

  int master = posix_openpt(O_RDWR | O_NOCTTY);
  if (master < 0 || grantpt(master) || unlockpt(master)) die("posix_openpt");
  const char *slave_name = ptsname(master);
  if (!slave_name) die("ptsname");
  struct winsize ws = {24, 80, 0, 0};
  pid_t pid = fork();
  if (pid < 0) die("fork");
  if (pid == 0) {
    setsid();
    int slave = open(slave_name, O_RDWR);
    if (slave < 0) die(slave_name);
    ioctl(slave, TIOCSCTTY, 0);
    ioctl(slave, TIOCSWINSZ, &ws);
    dup2(slave, 0);
    dup2(slave, 1);
    dup2(slave, 2);
    if (slave > 2) close(slave);
    close(master);
    setenv("TERM", getenv("TERM") ? getenv("TERM") : "dumb", 0);
    execvp(argv[a + 1], argv + a + 1);
    die(argv[a + 1]);
  }

  Out o = {0};
  out_add(&o, '\0');
  o.n = 0;
  char line[4096];
  int ln = 0, want_exit = -1, closed = 0;
  const char *absent[64];
  int absent_line[64], nabsent = 0;
  while (fgets(line, sizeof line, sf)) {
    ln++;
    line[strcspn(line, "\n")] = '\0';
    char *arg = strchr(line, ' ');
    if (arg) *arg++ = '\0';
    if (line[0] == '\0' || line[0] == '#') continue;
    size_t len = 0;
    const char *text = arg ? unescape(arg, &len) : "";
    if (strcmp(line, "send") == 0) {
      while (pump(master, &o, 0) > 0) {
      }
      if (write(master, text, len) != (ssize_t)len)
        fail(script, ln, "the terminal took no input", &o);
    } else if (strcmp(line, "expect") == 0) {
      double end = now() + timeout;
      char want[4096];
      memcpy(want, text, len);
      want[len] = '\0';
      char *at;
      while (!(at = strstr(o.text + o.from, want))) {
        if (closed || now() > end) {
          char why[4200];
          snprintf(why, sizeof why, "expected \"%s\" %s", arg,
                   closed ? "before the program ended" : "in time");
          fail(script, ln, why, &o);
        }
        if (pump(master, &o, 0.1) < 0) closed = 1;
      }
      o.from = (size_t)(at - o.text) + len;
    } else if (strcmp(line, "absent") == 0 && nabsent < 64) {
      absent[nabsent] = strdup(text);
      absent_line[nabsent++] = ln;
    } else if (strcmp(line, "exit") == 0) {
      want_exit = atoi(text);
    } else {
      fail(script, ln, "unknown step (send, expect, absent, exit)", &o);
    }
  }
  fclose(sf);

  /* the rest of the output, until the program ends */
  double end = now() + timeout;
  int status = 0;
  pid_t done = 0;
  while ((done = waitpid(pid, &status, WNOHANG)) == 0) {
    if (now() > end) {
      kill(pid, SIGKILL);
      waitpid(pid, &status, 0);
      fail(script, ln, "the program did not end in time", &o);
    }
    if (pump(master, &o, 0.05) < 0) closed = 1;
  }
  while (pump(master, &o, 0) > 0) {
  }
  printf("%s\n", o.text);
  for (int i = 0; i < nabsent; i++)
    if (strstr(o.text, absent[i])) {
      char why[4200];
      snprintf(why, sizeof why, "the output holds \"%s\"", absent[i]);
      fail(script, absent_line[i], why, &o);
    }
  int code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  if (want_exit >= 0 && code != want_exit) {
    char why[64];
    snprintf(why, sizeof why, "exit status %d, expected %d", code, want_exit);
    fail(script, ln, why, &o);
  }
  for (int i = 0; i < nabsent; i++)
    free((char *)absent[i]);
  free(o.text);
  close(master);
  return 0;
}
