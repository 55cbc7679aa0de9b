/*
** enums.c -- the spellings of the enum lists of enums.h.
*/
#include <string.h>

#include "enums.h"

#define IR_ENUM_DEFINE(L, lname) const char *const L##_names[] = {L##_LIST(IR_ENUM_NAME) NULL};
IR_ENUM_LISTS(IR_ENUM_DEFINE, IR_ENUM_DEFINE)
#undef IR_ENUM_DEFINE

int ir_enum_index(const char *const *names, const char *s) {
  for (int i = 0; s && names[i]; i++)
    if (strcmp(names[i], s) == 0) return i;
  return -1;
}
