/* Loads each shared library named on the command line (or, with -f FILE,
 * one per line of FILE) the way the server does, dlopen(RTLD_NOW |
 * RTLD_LOCAL), and fails if any does not load: an image that lacks a
 * library the server can use is caught at build time, not at the first
 * request that needs it. Prints each library with the path it resolved to.
 * C and libc only, so that it runs in any runtime image. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <link.h>
#include <stdio.h>
#include <string.h>

static int check(const char* name) {
  void* lib = dlopen(name, RTLD_NOW | RTLD_LOCAL);
  if (lib == NULL) {
    const char* error = dlerror();
    fprintf(stderr, "MISSING %s: %s\n", name, error ? error : "?");
    return 1;
  }
  struct link_map* map = NULL;
  const char* path = "?";
  if (dlinfo(lib, RTLD_DI_LINKMAP, &map) == 0 && map != NULL &&
      map->l_name != NULL && map->l_name[0] != '\0')
    path = map->l_name;
  printf("ok %s => %s\n", name, path);
  return 0;
}

int main(int argc, char** argv) {
  int failed = 0, checked = 0;
  for (int i = 1; i < argc; ++i) {
    if (strcmp(argv[i], "-f") == 0 && i + 1 < argc) {
      FILE* f = fopen(argv[++i], "r");
      if (f == NULL) {
        perror(argv[i]);
        return 2;
      }
      char line[4096];
      while (fgets(line, sizeof line, f) != NULL) {
        line[strcspn(line, " \t\r\n#")] = '\0';
        if (line[0] == '\0') continue;
        failed += check(line);
        ++checked;
      }
      fclose(f);
    } else {
      failed += check(argv[i]);
      ++checked;
    }
  }
  if (checked == 0) {
    fprintf(stderr, "usage: %s (LIBRARY | -f FILE)...\n", argv[0]);
    return 2;
  }
  printf("%d of %d libraries loaded\n", checked - failed, checked);
  return failed == 0 ? 0 : 1;
}
