/* notes: replays a command file against an in-memory list of notes.
 * Commands, one per byte: 'a' adds a note (next byte is its value), 'd' deletes the newest note,
 * 'p' prints the selected note, 's' selects the newest note. */
#include <stdio.h>
#include <stdlib.h>

struct note { int value; struct note *prev; };

int main(int argc, char **argv) {
    if (argc != 2) { fprintf(stderr, "usage: %s FILE\n", argv[0]); return 2; }
    FILE *f = fopen(argv[1], "rb");
    if (!f) { perror("open"); return 2; }
    struct note *top = NULL, *selected = NULL;
    int c;
    while ((c = fgetc(f)) != EOF) {
        if (c == 'a') {
            int v = fgetc(f);
            if (v == EOF) break;
            struct note *n = malloc(sizeof *n);
            n->value = v;
            n->prev = top;
            top = n;
        } else if (c == 'd' && top) {
            struct note *old = top;
            top = top->prev;
            free(old);
        } else if (c == 's') {
            selected = top;
        } else if (c == 'p' && selected) {
            printf("note %d\n", selected->value);
        }
    }
    fclose(f);
    while (top) { struct note *p = top->prev; free(top); top = p; }
    return 0;
}
