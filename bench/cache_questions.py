"""The questions of ``switchyard bench cache``: paraphrases of the same question, and
near misses (a question worded like one of them whose answer is another).

Each group is a meaning (its name) with its paraphrases; each near miss is a meaning of
its own, worded as close to the group's first question as an honest user would. Written
by hand, fixed: the benchmark is deterministic.
"""

from __future__ import annotations

#: (meaning, paraphrases, near miss (meaning, question)).
GROUPS: list[tuple[str, list[str], tuple[str, str]]] = [
    (
        "boiling-point",
        [
            "What is the boiling point of water at sea level?",
            "At sea level, at what temperature does water boil?",
            "What temperature does water boil at, at sea level?",
            "What's the boiling temperature of water at sea level?",
        ],
        ("freezing-point", "What is the freezing point of water at sea level?"),
    ),
    (
        "capital-france",
        [
            "What is the capital of France?",
            "Which city is the capital of France?",
            "Tell me the capital city of France.",
            "France's capital is which city?",
        ],
        ("capital-germany", "What is the capital of Germany?"),
    ),
    (
        "python-reverse-list",
        [
            "How do I reverse a list in Python?",
            "How can I reverse a Python list?",
            "What's the way to reverse the order of a list in Python?",
            "Python: how to reverse a list?",
        ],
        ("python-sort-list", "How do I sort a list in Python?"),
    ),
    (
        "http-404",
        [
            "What does HTTP status code 404 mean?",
            "What is the meaning of an HTTP 404 error?",
            "Explain the HTTP 404 status code.",
            "What does a 404 response from a web server mean?",
        ],
        ("http-500", "What does HTTP status code 500 mean?"),
    ),
    (
        "speed-of-light",
        [
            "What is the speed of light in a vacuum?",
            "How fast does light travel in a vacuum?",
            "What's the speed of light in vacuum?",
            "At what speed does light propagate in a vacuum?",
        ],
        ("speed-of-sound", "What is the speed of sound in air?"),
    ),
    (
        "git-undo-commit",
        [
            "How do I undo the last git commit?",
            "How can I revert my most recent commit in git?",
            "What is the git command to undo the last commit?",
            "Git: how do I undo my last commit?",
        ],
        ("git-undo-push", "How do I undo the last git push?"),
    ),
    (
        "photosynthesis",
        [
            "How does photosynthesis work?",
            "Explain how photosynthesis works.",
            "Can you explain the process of photosynthesis?",
            "What is the process of photosynthesis in plants?",
        ],
        ("cellular-respiration", "How does cellular respiration work?"),
    ),
    (
        "tallest-mountain",
        [
            "What is the tallest mountain in the world?",
            "Which mountain is the highest on Earth?",
            "What's the highest mountain in the world?",
            "Name the tallest mountain on the planet.",
        ],
        ("longest-river", "What is the longest river in the world?"),
    ),
    (
        "sql-join-inner",
        [
            "What is an inner join in SQL?",
            "Explain SQL inner joins.",
            "How does an INNER JOIN work in SQL?",
            "What does INNER JOIN do in SQL?",
        ],
        ("sql-join-left", "What is a left join in SQL?"),
    ),
    (
        "convert-km-miles",
        [
            "How many miles are in 10 kilometers?",
            "Convert 10 kilometers to miles.",
            "What is 10 km in miles?",
            "10 kilometres equals how many miles?",
        ],
        ("convert-km-miles-100", "How many miles are in 100 kilometers?"),
    ),
    (
        "author-1984",
        [
            "Who wrote the novel 1984?",
            "Who is the author of 1984?",
            "Which writer wrote the book 1984?",
            "1984 was written by whom?",
        ],
        ("author-brave-new-world", "Who wrote the novel Brave New World?"),
    ),
    (
        "tcp-vs-udp",
        [
            "What is the difference between TCP and UDP?",
            "How does TCP differ from UDP?",
            "TCP vs UDP: what are the differences?",
            "Explain the differences between the TCP and UDP protocols.",
        ],
        ("http-vs-https", "What is the difference between HTTP and HTTPS?"),
    ),
    (
        "sleep-hours",
        [
            "How many hours of sleep does an adult need?",
            "How much sleep should an adult get each night?",
            "What is the recommended amount of sleep for adults?",
            "How many hours should adults sleep per night?",
        ],
        ("sleep-hours-teen", "How many hours of sleep does a teenager need?"),
    ),
    (
        "js-array-length",
        [
            "How do I get the length of an array in JavaScript?",
            "In JavaScript, how do I find an array's length?",
            "How can I count the elements of a JavaScript array?",
            "JavaScript: how to get the number of items in an array?",
        ],
        ("js-string-length", "How do I get the length of a string in JavaScript?"),
    ),
    (
        "ww2-end",
        [
            "When did World War II end?",
            "In what year did the Second World War end?",
            "What year did WW2 end?",
            "When was the end of World War 2?",
        ],
        ("ww1-end", "When did World War I end?"),
    ),
    (
        "prime-definition",
        [
            "What is a prime number?",
            "Define a prime number.",
            "What does it mean for a number to be prime?",
            "Can you explain what prime numbers are?",
        ],
        ("composite-definition", "What is a composite number?"),
    ),
    (
        "docker-list-containers",
        [
            "How do I list running Docker containers?",
            "What command shows the running containers in Docker?",
            "How can I see which Docker containers are running?",
            "Docker: list the containers that are running.",
        ],
        ("docker-list-images", "How do I list Docker images?"),
    ),
    (
        "moon-distance",
        [
            "How far is the Moon from the Earth?",
            "What is the distance between the Earth and the Moon?",
            "How many kilometers away is the Moon?",
            "What's the distance from Earth to the Moon?",
        ],
        ("sun-distance", "How far is the Sun from the Earth?"),
    ),
    (
        "regex-email",
        [
            "What regex matches an email address?",
            "Give me a regular expression to validate an email address.",
            "How do I match email addresses with a regex?",
            "Regular expression for checking an email address?",
        ],
        ("regex-phone", "What regex matches a phone number?"),
    ),
    (
        "water-intake",
        [
            "How much water should I drink per day?",
            "What is the recommended daily water intake?",
            "How many liters of water should a person drink each day?",
            "How much water does an adult need daily?",
        ],
        ("coffee-intake", "How much coffee is safe to drink per day?"),
    ),
]


def questions() -> list[tuple[str, str]]:
    """Every (meaning, question): the paraphrases, then the near misses."""
    found = [(meaning, q) for meaning, paraphrases, _ in GROUPS for q in paraphrases]
    return found + [near for _, _, near in GROUPS]
