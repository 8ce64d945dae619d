// For the Python package's tests: prints parse_problem's canonical form of each line read from
// stdin ("error: MESSAGE" for a line that does not parse), so that the same text can be compared
// with str(convplan.Problem(line)).
#include <iostream>
#include <string>

#include "convplan/problem.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    convplan::StatusOr<convplan::ConvProblem> p = convplan::parse_problem(line);
    if (!p.ok()) {
      std::cout << "error: " << p.status().message() << "\n";
    } else if (convplan::Status s = p->validate(); !s.ok()) {
      std::cout << "error: " << s.message() << "\n";
    } else {
      std::cout << p->to_string() << "\n";
    }
  }
  return 0;
}
