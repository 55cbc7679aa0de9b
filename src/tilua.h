/* placeholder, replaced below */
#ifndef TILUA_H
#define TILUA_H
#endif
