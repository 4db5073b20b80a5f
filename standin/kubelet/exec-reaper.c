// pods/exec's reaper: what containerd's shim does for an exec, without the shim's FIFOs. It becomes a child subreaper,
// runs `runc exec --detach --pid-file PIDFILE …` (given as its arguments) with its own stdio, which the command
// inherits — the kubelet's pipes, no copy in between — and waits for that command: runc leaves it behind, orphaned to
// this process. Exits with the command's exit code (128 + the signal that ended it), 126 if runc could not start it.
//   exec-reaper PIDFILE runc [runc's arguments…]
#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

static int code_of(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  if (WIFSIGNALED(status)) return 128 + WTERMSIG(status);
  return 126;
}

int main(int argc, char **argv) {
  if (argc < 3) {
    fprintf(stderr, "usage: exec-reaper PIDFILE runc [argument…]\n");
    return 126;
  }
  if (prctl(PR_SET_CHILD_SUBREAPER, 1) != 0) {
    perror("exec-reaper: prctl(PR_SET_CHILD_SUBREAPER)");
    return 126;
  }
  pid_t runc = fork();
  if (runc < 0) {
    perror("exec-reaper: fork");
    return 126;
  }
  if (runc == 0) {
    execvp(argv[2], argv + 2);
    perror("exec-reaper: exec runc");
    _exit(126);
  }
  int status;
  while (waitpid(runc, &status, 0) < 0) {
    if (errno != EINTR) {
      perror("exec-reaper: waitpid runc");
      return 126;
    }
  }
  if (!WIFEXITED(status) || WEXITSTATUS(status) != 0) return 126; // runc said why on our stderr
  FILE *f = fopen(argv[1], "r");
  long command = 0;
  if (!f || fscanf(f, "%ld", &command) != 1 || command <= 1) {
    fprintf(stderr, "exec-reaper: runc wrote no pid to %s\n", argv[1]);
    return 126;
  }
  fclose(f);
  // Reap whatever is orphaned to us (runc's own helpers) until the command itself ends.
  for (;;) {
    pid_t pid = waitpid(-1, &status, 0);
    if (pid == command) return code_of(status);
    if (pid < 0 && errno != EINTR) {
      // ECHILD: it was never ours (cannot happen while runc runs it detached under us), nothing to wait for.
      perror("exec-reaper: waitpid");
      return 126;
    }
  }
}
