/* cfg: parses "key=value" lines and prints the effective settings.
 * A repeated key replaces the earlier value. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

struct setting { char *key; char *value; };

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "r");
    if (!f) { perror("open"); return 2; }
    struct setting s[16];
    int count = 0;
    char line[256];
    while (fgets(line, sizeof line, f) && count < 16) {
        char *eq = strchr(line, '=');
        if (!eq) continue;
        *eq = '\0';
        line[strcspn(line, "\n")] = '\0';
        eq[1 + strcspn(eq + 1, "\n")] = '\0';
        int i;
        for (i = 0; i < count && strcmp(s[i].key, line) != 0; i++) {}
        if (i < count) {
            free(s[i].value);
            if (eq[1] == '\0') continue; /* "key=" clears the value */
        } else {
            s[count].key = strdup(line);
            count++;
        }
        s[i].value = strdup(eq + 1);
    }
    fclose(f);
    for (int i = 0; i < count; i++) {
        printf("%s=%s\n", s[i].key, s[i].value ? s[i].value : "");
        free(s[i].key);
        free(s[i].value);
    }
    return 0;
}
