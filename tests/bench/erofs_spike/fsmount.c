// fsmount IMAGE DIR [OPTS] : mount(2) erofs directly (util-linux mount would add a loop device for a regular file).
#include <stdio.h>
#include <sys/mount.h>
int main(int c, char** v){ if (c < 3) return 2; if (mount(v[1], v[2], "erofs", MS_RDONLY, c > 3 ? v[3] : NULL)) { perror("mount"); return 1; } return 0; }
